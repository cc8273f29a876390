"""`{% deployment_switch_offer model %}`: on a model's evaluation page, the project's deployments of its kind that
serve another model, each with a button that switches it to this one (for those who may change them)."""

from __future__ import annotations

from django import template

from inference import permissions as inference_perms
from projects import access

from ..models import Deployment

register = template.Library()


@register.inclusion_tag("inference/_switch_offer.html", takes_context=True)
def deployment_switch_offer(context, model) -> dict:
    request = context.get("request")
    user = getattr(request, "user", None)
    offers = []
    if user is not None and access.can(user, inference_perms.DEPLOY_PROJECT, model.project):
        rows = (
            Deployment.objects.select_related("trained_model")
            .filter(trained_model__project_id=model.project_id, trained_model__kind=model.kind)
            .exclude(trained_model=model)
            .order_by("name")
        )
        offers = [d for d in rows if access.can(user, inference_perms.DEPLOY, d)]
    return {"offers": offers, "model": model, "csrf_token": context.get("csrf_token")}
