"""`{% rlinf_vlm_panel model %}`: a VLM model's RLinf export status and the button that writes it."""

from __future__ import annotations

from django import template

from ..rlinf_vlm.services import model_rlinf_status

register = template.Library()


@register.inclusion_tag("training/_rlinf_vlm.html", takes_context=True)
def rlinf_vlm_panel(context, model) -> dict:
    return {"model": model, "rlinf": model_rlinf_status(model=model), "csrf_token": context.get("csrf_token")}
