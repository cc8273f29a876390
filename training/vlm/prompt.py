"""The trend prompt: a project's template filled with its task description and window size.

`DEFAULT_PROMPT_TEMPLATE` is every new project's template (labeling.models takes it from here, so this
module stays free of Django). It is RLinf's fixed trend prompt: RLinf's local reward worker
(`VLMTrendRewardInputBuilder.prepare_inputs` in
`rlinf/models/embodiment/reward/vlm_reward_utils/input_builder.py`) always sends that text with the
task filled in, so a model meant for RLinf must be trained on it word for word (an interface constant,
like a key name; it says "5-frame" whatever the window size, as RLinf's does).
"""

from __future__ import annotations

import string

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
FIELDS = ("task", "window_size")


def template_check(template: str) -> None:
    """Raise ValueError when the template is malformed or names a field other than {task}, {window_size}."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"prompt template is not a valid format string: {exc}") from None
    unknown = names - set(FIELDS)
    if unknown:
        raise ValueError(f"prompt template names unknown fields {sorted(unknown)}; allowed: {{task}}, {{window_size}}")


def prompt_render(template: str | None, *, task: str, window_size: int) -> str:
    template = template or DEFAULT_PROMPT_TEMPLATE
    template_check(template)
    return template.format(task=task.strip() or "the task", window_size=int(window_size))
