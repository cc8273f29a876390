"""Which prompt a chat request is judged with, and whether the request's task text differs from the trained
one (no Django). RLinf's API reward worker sends its own `default_task_description` inside its fixed trend
prompt; a model trained on another task must not silently be judged with it."""

from __future__ import annotations

from dataclasses import dataclass

from training.vlm.prompt import prompt_task

TRAINED, REQUEST = "trained", "request"


@dataclass(frozen=True)
class PromptPick:
    prompt: str  # the text the model is judged with
    judged_with: str  # TRAINED or REQUEST
    differs: bool  # the request sent text other than the trained prompt
    trained_task: str
    request_task: str | None  # the task inside the request's text (None: no text, or not the trained template)
    request_text: str = ""

    def report(self) -> dict:
        return {
            "judged_with": self.judged_with,
            "differs": self.differs,
            "trained_task": self.trained_task,
            "request_task": self.request_task,
        }


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def chat_prompt_pick(
    request_prompt: str | None, *, trained: str, use: str, template: str | None, trained_task: str, window_size: int
) -> PromptPick:
    """`use` (the deployment's `chat_prompt`): TRAINED judges with the trained prompt whatever the request
    says; REQUEST with the request's text when it sends one. Either way `differs` tells."""
    if use not in (TRAINED, REQUEST):
        raise ValueError(f"chat_prompt must be {TRAINED!r} or {REQUEST!r}, got {use!r}")
    text = (request_prompt or "").strip()
    differs = bool(text) and not _same(text, trained)
    request_task = prompt_task(template, text, window_size=window_size) if text else None
    judged_with = REQUEST if use == REQUEST and text else TRAINED
    return PromptPick(
        prompt=text if judged_with == REQUEST else trained,
        judged_with=judged_with,
        differs=differs,
        trained_task=trained_task,
        request_task=request_task,
        request_text=text,
    )
