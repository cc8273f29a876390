"""Train-to-target loop (services): retrain after N new human labels, redeploy when better.

`retrain_check` runs from a periodic task: once a project's human labels grew by `retrain_after_labels`
since its last automatic job, it builds a fresh snapshot and queues a ResNet job on it. `after_training`
runs when a job succeeded: it re-ranks the labeling queue and, when the policy names a deployment,
announces the new model (`training.signals.redeploy_candidate`). The app serving that deployment
(`inference.redeploy`) answers with `redeploy_compare`: the served model and the new one are compared on
the fixed evaluation split (accuracy at the deployment's threshold) and the deployment is switched to the
new model only when it is better. Training itself knows nothing of deployments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.urls import reverse

from common.jobs.models import JobStatus
from labeling.labels.selectors import human_frame_label_count
from projects.models import Project
from training.evaluation import metrics as evaluation
from training.evaluation.model_evaluation import EvaluationUnavailable, model_predictions

from ..models import RetrainPolicy, TrainedModel, TrainingJob
from ..signals import redeploy_candidate

log = logging.getLogger(__name__)


def human_label_count(project: Project) -> int:
    return human_frame_label_count(project=project)


def retrain_check(*, policy: RetrainPolicy) -> TrainingJob | None:
    """Queue a job on a fresh snapshot when enough new human labels arrived (and none is running)."""
    from ..services import job_create
    from ..snapshots.services import snapshot_create

    if policy.retrain_after_labels <= 0:
        return None
    count = human_label_count(policy.project)
    if count - policy.labels_at_last_job < policy.retrain_after_labels:
        return None
    if policy.last_job and policy.last_job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
        return None
    snapshot = snapshot_create(project=policy.project)
    if snapshot.status != snapshot.Status.READY:
        log.warning("automatic snapshot of %s failed: %s", policy.project, snapshot.error[:300])
        return None
    job = job_create(
        project=policy.project,
        snapshot=snapshot,
        config=policy.job_config or {},
        name=f"automatic: {count - policy.labels_at_last_job} new labels",
    )
    RetrainPolicy.objects.filter(pk=policy.pk).update(
        labels_at_last_job=count, last_job=job, eval_snapshot=policy.eval_snapshot or snapshot
    )
    return job


def accuracy_on(model: TrainedModel, snapshot, threshold: float) -> float:
    probs, labels = model_predictions(model=model, snapshot=snapshot)
    return float(evaluation.metrics_at(probs, labels, threshold)["accuracy"])


def redeploy_compare(
    *,
    policy: RetrainPolicy,
    deployment: str,
    served_model: TrainedModel,
    threshold: float,
    new_model: TrainedModel,
    switch: Callable[[], object],
) -> dict[str, Any]:
    """Compare the model `deployment` serves and `new_model` on the policy's fixed split at the deployment's
    threshold; call `switch()` (which moves the deployment to `new_model`) when the new one is better.

    The comparison is kept on the policy (`last_comparison`) and returned; {} when there is nothing to
    compare (no evaluation split yet, or the deployment already serves `new_model`).
    """
    if policy.eval_snapshot is None or served_model.pk == new_model.pk:
        return {}
    result: dict[str, Any]
    try:
        old_acc = accuracy_on(served_model, policy.eval_snapshot, threshold)
        new_acc = accuracy_on(new_model, policy.eval_snapshot, threshold)
    except EvaluationUnavailable as exc:
        result = {"error": str(exc)}
    else:
        better = new_acc > old_acc
        if better:
            switch()
        result = {
            "deployment": deployment,
            "snapshot": policy.eval_snapshot.number,
            "old_model": served_model.pk,
            "old_accuracy": old_acc,
            "new_model": new_model.pk,
            "new_accuracy": new_acc,
            "redeployed": better,
            "compare_url": f"{reverse('training-compare', args=[policy.project_id])}?a={served_model.pk}"
            f"&b={new_model.pk}&snapshot={policy.eval_snapshot.pk}",
        }
    RetrainPolicy.objects.filter(pk=policy.pk).update(last_comparison=result)
    return result


def after_training(*, job_id: int) -> None:
    """A job succeeded: re-rank the labeling queue, then redeploy if the project's policy says so."""
    from .services import label_queue_recompute

    job = TrainingJob.objects.select_related("project").get(pk=job_id)
    label_queue_recompute(project=job.project)
    policy = RetrainPolicy.objects.select_related("eval_snapshot", "project").filter(project=job.project).first()
    model = TrainedModel.objects.filter(job=job).order_by("-created_at").first()
    if policy and policy.redeploy and model is not None:
        redeploy_candidate.send(sender=RetrainPolicy, policy=policy, new_model=model)


def retrain_sweep() -> int:
    """Check every project with a retrain policy; returns how many jobs were queued."""
    queued = 0
    for policy in RetrainPolicy.objects.filter(retrain_after_labels__gt=0).select_related("project", "last_job"):
        queued += retrain_check(policy=policy) is not None
    return queued
