"""A trained model's predictions on a snapshot's validation split, and the evaluation page's data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import numpy as np
from django.conf import settings
from django.core.files.storage import default_storage
from django.urls import reverse

from labeling.models import Frame
from training.datasets.rlinf_binary import read_payload
from training.evaluation import metrics as evaluation
from training.evaluation.metrics import PrecisionDifference
from training.evaluation.precision import BF16, FP16, FP32, PrecisionError
from training.models import DatasetSnapshot, ModelKind, TrainedModel
from training.page_data import EvaluationItem, ModelEvaluation, ValFrame
from training.resnet.val_predictions import VAL_PREDICTIONS, read_val_predictions
from training.storage import local_path

PRECISION_FRAMES = 256  # validation frames each reduced precision is compared on (bounds the page's first load)
REDUCED = (BF16, FP16)


class EvaluationUnavailable(ValueError):
    pass


class EvaluationPending(EvaluationUnavailable):
    """The figures are not on disk yet and this caller must not compute them (`compute=False`)."""


def model_sanity(model: TrainedModel, *, compute: bool = True) -> list[str]:
    """The sanity check's findings (evaluation.sanity_check) for a ResNet model on its own snapshot's val split;
    none when it cannot be judged. `compute=False` judges only from predictions already on disk (those its
    training wrote, or an earlier evaluation's): the job page's live state must never score a split."""
    if model.kind != ModelKind.RESNET or model.snapshot is None:
        return []
    try:
        probs, labels = model_predictions(model=model, snapshot=model.snapshot, compute=compute)
    except (EvaluationUnavailable, OSError, ValueError):
        return []
    return evaluation.sanity_check(probs, labels)


def model_predictions(
    *, model: TrainedModel, snapshot: DatasetSnapshot, compute: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities and labels of the snapshot's val split; computed once per (model, snapshot), then cached
    (`compute=False`: EvaluationUnavailable unless they are on disk already)."""
    if model.kind != ModelKind.RESNET:
        raise EvaluationUnavailable("frame evaluation applies to ResNet models; VLM models are scored on windows")
    if snapshot.status != DatasetSnapshot.Status.READY:
        raise EvaluationUnavailable(f"snapshot #{snapshot.number} is {snapshot.status}")
    folder = local_path(model.checkpoint_path)
    if not folder.exists():
        raise EvaluationUnavailable("the model's checkpoint files are gone")
    cached = folder / f"val_predictions_snapshot_{snapshot.pk}.json"
    if model.snapshot_id == snapshot.pk and (folder / VAL_PREDICTIONS).exists():
        result = read_val_predictions(folder)
        if result is not None:
            return result
    if cached.exists():
        data = json.loads(cached.read_text())
        return np.asarray(data["probabilities"]), np.asarray(data["labels"])
    if not compute:
        raise EvaluationPending("the model's predictions on this split are not computed yet")
    val = read_payload(local_path(snapshot.folder) / "val.pt", mmap=True)  # frames stay on disk until scored
    probs = _predictions_within_budget(folder, val["images"])
    labels = np.asarray(val["labels"], dtype=np.int64)
    cached.write_text(json.dumps({"probabilities": [float(p) for p in probs], "labels": labels.tolist()}))
    return probs.astype(np.float64), labels


def _predictions_within_budget(checkpoint: Path, images, precision: str = FP32, device: str = "cpu") -> np.ndarray:
    """The checkpoint's probabilities for a payload's frames, each cut and resized to the model's input on
    its own (input_frame) and scored a batch of settings.BACKGROUND_DECODE_PIXELS at a time, at `precision`
    on `device` as an inference worker places the model (PrecisionError when the device cannot run it)."""
    from training.resnet.checkpoint import load_checkpoint
    from training.resnet.model import input_frame, predict_proba, uncropped
    from training.resnet.placement import HostStaging, model_place, placement_for

    placement = placement_for(device, precision)
    net, config = load_checkpoint(checkpoint)
    net = model_place(uncropped(net), placement)
    staging = HostStaging(placement)
    per_frame = config.image_size[1] * config.image_size[2]
    step = max(1, settings.BACKGROUND_DECODE_PIXELS // per_frame)
    probabilities = [np.zeros(0, dtype=np.float32)]
    for start in range(0, len(images), step):
        batch = np.stack([input_frame(np.asarray(image), config) for image in images[start : start + step]])
        probabilities.append(predict_proba(net, batch, batch_size=64, to_device=staging.to_device))
    return np.concatenate(probabilities)


def precision_differences(
    *, model: TrainedModel, snapshot: DatasetSnapshot, reference: np.ndarray, threshold: float, compute: bool = True
) -> list[PrecisionDifference]:
    """bf16 and fp16 against the fp32 probabilities the page shows (`reference`), on the first
    PRECISION_FRAMES validation frames, on this process's device (a GPU when it has one); computed once per
    (model, snapshot), then cached beside the checkpoint. A precision the device refuses says why.
    `compute=False` (the evaluation page): whichever device's figures are on disk, a GPU's first, without
    importing torch; EvaluationPending when none are."""
    folder = local_path(model.checkpoint_path)
    frames = min(len(reference), PRECISION_FRAMES)
    if compute:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        on_disk = [d for d in ("cuda", "cpu") if (folder / f"val_precisions_snapshot_{snapshot.pk}_{d}.json").exists()]
        if not on_disk:
            raise EvaluationPending("the model's bf16 and fp16 comparison is not computed yet")
        device = on_disk[0]
    cached = folder / f"val_precisions_snapshot_{snapshot.pk}_{device}.json"
    if cached.exists():
        measured = json.loads(cached.read_text())
    else:
        try:
            images = read_payload(local_path(snapshot.folder) / "val.pt", mmap=True)["images"][:frames]
        except (OSError, ValueError, KeyError):  # the snapshot's files are gone: nothing to compare on
            return []
        measured = {}
        for precision in REDUCED:
            try:
                probs = _predictions_within_budget(folder, images, precision, device)
                measured[precision] = {"probabilities": [float(p) for p in probs], "refused": ""}
            except PrecisionError as exc:
                measured[precision] = {"probabilities": [], "refused": str(exc)}
        cached.write_text(json.dumps(measured))
    rows: list[PrecisionDifference] = []
    for precision in REDUCED:
        probs, refused = measured[precision]["probabilities"], measured[precision]["refused"]
        figures = (
            (None, None, None)
            if refused
            else evaluation.precision_difference(reference[: len(probs)], probs, threshold)
        )
        where = {"precision": precision, "device": device, "frames": frames, "refused": refused}
        row = {**where, "probabilities": probs, **dict(zip(("max_abs", "mean_abs", "flips"), figures, strict=True))}
        rows.append(cast(PrecisionDifference, row))
    return rows


def val_items(*, snapshot: DatasetSnapshot) -> list[ValFrame]:
    """The val split's frames in payload order: episode, step, label, image URL and labeling-page link."""
    path = local_path(snapshot.folder) / "val_index.json"
    index = json.loads(path.read_text()) if path.exists() else []
    camera = snapshot.stats.get("camera") or snapshot.options.get("camera") or "main"
    uuids = {row["episode"] for row in index}
    names = {
        (str(uuid), step): name
        for uuid, step, name in Frame.objects.filter(step__episode__uuid__in=uuids, camera=camera).values_list(
            "step__episode__uuid", "step__index", "image"
        )
    }
    items = []
    for row in index:
        name = names.get((row["episode"], row["step"]))
        items.append(
            ValFrame(
                episode=row["episode"],
                step=row["step"],
                label=row["label"],
                image=default_storage.url(name) if name else None,
                label_url=reverse("episode-label", args=[row["episode"]]) + f"?step={row['step']}",
            )
        )
    return items


def evaluation_data(
    *, model: TrainedModel, snapshot: DatasetSnapshot | None = None, threshold: float = 0.5, compute: bool = True
) -> ModelEvaluation:
    """The evaluation page's data. `compute=False` scores nothing: EvaluationPending unless every figure is on
    disk (written when the job finished, training.evaluation.precompute, or on demand for older models)."""
    snapshot = snapshot or model.snapshot
    if snapshot is None:
        raise EvaluationUnavailable("the model's snapshot was deleted; compare it on another snapshot")
    probs, labels = model_predictions(model=model, snapshot=snapshot, compute=compute)
    frames = val_items(snapshot=snapshot)
    if len(frames) != len(probs):
        frames = [
            ValFrame(episode="", step=i, label=int(labels[i]), image=None, label_url=None) for i in range(len(probs))
        ]
    items: list[EvaluationItem] = [{**frame, "probability": float(p)} for frame, p in zip(frames, probs, strict=True)]
    return {
        "model": {"id": model.pk, "name": model.name, "kind": model.kind, "metrics": model.metrics},
        "snapshot": {
            "id": snapshot.pk,
            "number": snapshot.number,
            "split": str(snapshot.stats.get("split", "")),
            "shared_episodes": snapshot.shared_episodes,
            "split_warning": snapshot.split_warning,
        },
        "threshold": threshold,
        "probabilities": [float(p) for p in probs],
        "labels": [int(v) for v in labels],
        "summary": evaluation.evaluate_predictions(probs, labels, threshold),
        "items": items,
        "order": evaluation.error_order(probs, labels),
        "precisions": precision_differences(
            model=model, snapshot=snapshot, reference=probs, threshold=threshold, compute=compute
        ),
    }
