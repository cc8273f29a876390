"""The trend prompt: a project's template filled with its task description and window size.

The templates themselves (`DEFAULT_PROMPT_TEMPLATE`, RLinf's fixed trend prompt, is every new project's)
live with the project model in projects/prompts.py, which needs no Django either.
"""

from __future__ import annotations

import re
import string

from projects.prompts import DEFAULT_PROMPT_TEMPLATE

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


def prompt_task(template: str | None, prompt: str, *, window_size: int) -> str | None:
    """The task text `prompt` was rendered with under `template` (None when the prompt does not fit it)."""
    template = template or DEFAULT_PROMPT_TEMPLATE
    template_check(template)
    pattern, seen = "", False
    for literal, name, _, _ in string.Formatter().parse(template):
        pattern += re.escape(literal.replace("{{", "{").replace("}}", "}"))
        if name == "task":
            pattern += "(?P=task)" if seen else "(?P<task>.*?)"
            seen = True
        elif name == "window_size":
            pattern += re.escape(str(int(window_size)))
    found = re.fullmatch(pattern, prompt.strip(), flags=re.DOTALL) if seen else None
    return found.group("task") if found else None
