"""The VLM trend prompt templates a project may use; `DEFAULT_PROMPT_TEMPLATE` is every new project's
(`Project.prompt_template`). No Django here, so training's Django-free VLM code renders them too
(training/vlm/prompt.py fills a template with the task and window size).

The default is RLinf's trend prompt: RLinf's dataset preprocessing
(`examples/reward/preprocess_vlm_trend_reward_dataset.py`) writes it into every training row with the task
and `{window_size}-frame` filled in, and its local reward worker (`VLMTrendRewardInputBuilder.prepare_inputs`
in `rlinf/models/embodiment/reward/vlm_reward_utils/input_builder.py`) sends the same text, which says
"5-frame" (RLinf's default window). A model meant for RLinf is trained on it word for word (an interface
constant, like a key name); the window size is the project's, so a model of 8-step windows is told "8-frame"
in training and when it is served, and at the default of 5 the text is RLinf's exactly.
"""

from __future__ import annotations

RLINF_TREND_PROMPT_TEMPLATE = (
    "You are currently performing the task: {task}. "
    "You are given two synchronized {window_size}-frame videos from different camera "
    "views (main view and third-person view) of the same robot action "
    "window. Judge whether the action trend is positive, negative, or "
    "unclear. Answer with exactly one word: positive, negative, or unclear."
)
REWARD_STUDIO_PROMPT_TEMPLATE = (
    "Task: {task}\n"
    "You see two synchronized videos of {window_size} frames each, one from the main camera and one "
    "from a second view. Judge whether the robot made progress on the task during these frames.\n"
    "Answer with exactly one word: positive, negative or unclear."
)
DEFAULT_PROMPT_TEMPLATE = RLINF_TREND_PROMPT_TEMPLATE
PROMPT_TEMPLATES = {"rlinf_trend": RLINF_TREND_PROMPT_TEMPLATE, "reward_studio": REWARD_STUDIO_PROMPT_TEMPLATE}
