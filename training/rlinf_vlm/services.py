"""A trained VLM model's RLinf export: its status (what the checkpoint recorded) and writing `full_weights.pt` from
the saved adapter, refused with the settings RLinf would load differently (training/vlm/rlinf_export.py)."""

from __future__ import annotations

from ..models import ModelKind, TrainedModel
from ..storage import local_path
from ..vlm.rlinf_export import rlinf_export_or_refuse, rlinf_status


class NotAVLM(ValueError):
    pass


def _folder(model: TrainedModel):
    if model.kind != ModelKind.VLM:
        raise NotAVLM(f"model {model.pk} is a {model.kind} model: the RLinf LoRA export is for VLM models")
    return local_path(model.checkpoint_path)


def model_rlinf_status(*, model: TrainedModel) -> dict:
    """rlinf_status of the model's checkpoint, with `path`: the absolute lora_path to give RLinf."""
    folder = _folder(model)
    status = rlinf_status(folder)
    return {**status, "path": str(folder / status["lora_path"])}


def model_rlinf_export(*, model: TrainedModel) -> dict:
    """Write the model's `full_weights.pt` (RlinfExportRefused naming each setting RLinf would load differently;
    FileNotFoundError when its adapter or base model is not on this machine)."""
    folder = _folder(model)
    record = rlinf_export_or_refuse(folder)
    return {**record, "checked": True, "present": True, "path": str(folder / record["lora_path"])}
