"""The evaluation page's figures computed ahead of its first open: by the training task right after it registers
a model, and on demand (a Celery task) for a model trained before that, while the page shows the stage reached
and reloads. The page itself never scores (evaluation_data(compute=False))."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TypedDict

from django.db import transaction

from training.models import ModelKind, TrainedModel
from training.storage import local_path

from .model_evaluation import model_predictions, precision_differences

logger = logging.getLogger(__name__)

PROGRESS_FILE = "evaluation_progress.json"  # beside the checkpoint while its figures are being computed
STALE_SECONDS = 600  # a request older than this whose task never finished is queued again
QUEUED = "queued"
SCORING = "scoring the validation split"
PRECISIONS = "comparing bf16 and fp16 with fp32"
STAGES = (QUEUED, SCORING, PRECISIONS)


class EvaluationProgress(TypedDict):
    stage: str  # one of STAGES
    step: int  # 1-based index of stage in STAGES
    steps: int
    since: float  # when the figures were asked for (time.time())
    error: str  # why the computation failed; "" while it runs


def evaluation_precompute(*, model: TrainedModel) -> None:
    """Score the model's own snapshot's val split and compare bf16/fp16 with fp32, cached beside the
    checkpoint (what the evaluation page reads). Nothing for a VLM or a model without a snapshot; a failure is
    kept in the progress file for the page to show, never raised (the model stays usable)."""
    snapshot = model.snapshot
    if model.kind != ModelKind.RESNET or snapshot is None:
        return
    folder = local_path(model.checkpoint_path)
    if not folder.exists():
        return
    since = _read(folder).get("since", time.time())
    try:
        _write(folder, SCORING, since)
        probs, _ = model_predictions(model=model, snapshot=snapshot)
        _write(folder, PRECISIONS, since)
        precision_differences(model=model, snapshot=snapshot, reference=probs, threshold=0.5)
    except Exception as exc:  # the job succeeded and its model is registered: the page shows why
        logger.exception("evaluation figures of model %s", model.pk)
        _write(folder, SCORING, since, error=f"{type(exc).__name__}: {exc}")
        return
    (folder / PROGRESS_FILE).unlink(missing_ok=True)


def evaluation_precompute_by_id(*, model_id: int) -> None:
    model = TrainedModel.objects.select_related("snapshot").filter(pk=model_id).first()
    if model is not None:
        evaluation_precompute(model=model)


def evaluation_request(*, model: TrainedModel) -> EvaluationProgress:
    """The figures' progress for a page that found them missing; queues their computation (once: a request
    still running, or failed, is not queued again until STALE_SECONDS have passed)."""
    folder = local_path(model.checkpoint_path)
    progress = _read(folder)
    if progress and time.time() - float(progress.get("since", 0)) < STALE_SECONDS:
        return _progress(progress)
    now = time.time()
    _write(folder, QUEUED, now)
    from training.tasks import compute_evaluation

    transaction.on_commit(lambda: compute_evaluation.delay(model.pk))
    return _progress({"stage": QUEUED, "since": now, "error": ""})


def _progress(data: dict) -> EvaluationProgress:
    stage = str(data.get("stage")) if data.get("stage") in STAGES else QUEUED
    return EvaluationProgress(
        stage=stage,
        step=STAGES.index(stage) + 1,
        steps=len(STAGES),
        since=float(data.get("since", 0)),
        error=str(data.get("error", "")),
    )


def _read(folder: Path) -> dict:
    try:
        data = json.loads((folder / PROGRESS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(folder: Path, stage: str, since: float, *, error: str = "") -> None:
    (folder / PROGRESS_FILE).write_text(json.dumps({"stage": stage, "since": since, "error": error}))
