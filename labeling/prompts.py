"""The VLM trend prompt templates a project may use; `DEFAULT_PROMPT_TEMPLATE` is every new project's
(`Project.prompt_template`). No Django here, so training's Django-free VLM code renders them too
(training/vlm/prompt.py fills a template with the task and window size).

The default is RLinf's fixed trend prompt: RLinf's local reward worker
(`VLMTrendRewardInputBuilder.prepare_inputs` in
`rlinf/models/embodiment/reward/vlm_reward_utils/input_builder.py`) always sends that text with the
task filled in, so a model meant for RLinf must be trained on it word for word (an interface constant,
like a key name; it says "5-frame" whatever the window size, as RLinf's does).
"""

from __future__ import annotations

RLINF_TREND_PROMPT_TEMPLATE = (
    "You are currently performing the task: {task}. "
    "You are given two synchronized 5-frame videos from different camera "
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
