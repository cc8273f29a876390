"""What a model's family says, for templates: `{% url model.kind|evaluation_page model.pk %}` and
`{% if model.kind|takes_windows %}`, so no page names a family by its kind (`training.families` answers)."""

from __future__ import annotations

from django import template

from training import families

register = template.Library()

# The generic evaluation page (`training.views`), for a kind no family has (the bench-only instant model).
GENERIC_EVALUATION = families.RESNET.evaluation_page


@register.filter
def evaluation_page(kind: str) -> str:
    """The URL name of the page that evaluates a trained model of `kind` (it takes the model's id)."""
    found = families.FAMILIES.get(kind)
    return GENERIC_EVALUATION if found is None else found.evaluation_page


@register.filter
def takes_windows(kind: str) -> bool:
    """Whether models of `kind` judge windows of frames with a chat prompt (the VLM)."""
    return families.takes_windows(kind)
