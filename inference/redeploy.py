"""Train-to-target's deployment side: the receivers of training's redeploy signals (`training.signals`).

Training announces a new model for a retrain policy that names a deployment; this finds that deployment
among the project's own (whatever a stored policy names), lets training compare the two models
(`training.queue.retrain.redeploy_compare`) and switches the deployment when the new one is better. It also tells
the retrain policy form whether a name is a deployment of the project the person may switch.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from inference import permissions as inference_perms
from projects import access
from training.models import RetrainPolicy, TrainedModel
from training.signals import redeploy_candidate, redeploy_target_check

from .models import Deployment
from .services import deployment_update


@receiver(redeploy_candidate, dispatch_uid="inference.redeploy.redeploy_when_better")
def redeploy_when_better(sender: Any, *, policy: RetrainPolicy, new_model: TrainedModel, **kwargs: Any) -> None:
    from training.queue.retrain import redeploy_compare  # torch: loaded by the worker that runs this, not at startup

    deployment = (
        Deployment.objects.select_related("trained_model")
        .filter(name=policy.redeploy, project_id=policy.project_id)
        .first()
    )
    if deployment is None:
        return
    redeploy_compare(
        policy=policy,
        deployment=deployment.name,
        served_model=deployment.trained_model,
        threshold=deployment.threshold,
        new_model=new_model,
        switch=lambda: deployment_update(
            deployment=deployment, trained_model=new_model, actor=f"retrain policy {policy.pk}"
        ),
    )


@receiver(redeploy_target_check, dispatch_uid="inference.redeploy.deployment_refusal")
def deployment_refusal(sender: Any, *, project_id: int, name: str, user: Any, **kwargs: Any) -> str | None:
    """None: the project has no deployment of that name; "": the person may switch it; else why not."""
    deployment = Deployment.objects.filter(name=name, project_id=project_id).first()
    if deployment is None:
        return None
    if not access.can(user, inference_perms.DEPLOY, deployment):
        return access.refusal(user, inference_perms.DEPLOY)
    return ""
