"""Load base Qwen3-VL models and save / reload LoRA checkpoints.

A checkpoint folder holds:
- `adapter/`: the PEFT adapter (`adapter_config.json`, `adapter_model.safetensors`);
- `vlm.json`: what rebuilds the scorer (base model folder, prompt template, task, window size, labels,
  LoRA settings, step, metrics);
- RLinf's `checkpoints/best_model/actor/model_state_dict/full_weights.pt` (written by `rlinf_export.py` from the
  adapter, unless the job turned `save_full_weights` off), a flat state dict of the `lora_` tensors only, keyed
  as peft's `get_peft_model_state_dict` writes them (no adapter name: `...q_proj.lora_A.weight`). RLinf's VLM
  reward model hands them to `set_peft_model_state_dict`, which inserts the adapter name itself; keys from
  `model.state_dict()` (`...lora_A.default.weight`) would get it twice, be ignored by its `strict=False` load and
  leave RLinf scoring with the untrained base model.
A folder that is itself a Hugging Face model (has `config.json`, no `vlm.json`) loads as a base model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from .labels import LABELS

if TYPE_CHECKING:
    import torch

ADAPTER_DIR = "adapter"
META_FILE = "vlm.json"


def device_pick(device: str = "auto") -> torch.device:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def dtype_pick(device: torch.device, bf16: bool = True) -> torch.dtype:
    import torch

    return torch.bfloat16 if (bf16 and device.type == "cuda") else torch.float32


def base_load(path: str | Path, *, device: str = "auto", bf16: bool = True):
    """(model, processor) from a local model folder; nothing is downloaded."""
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a model folder (no config.json)")
    dev = device_pick(device)
    model = Qwen3VLForConditionalGeneration.from_pretrained(path, dtype=dtype_pick(dev, bf16), local_files_only=True)
    processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    return model.to(dev), processor  # type: ignore[arg-type]  # transformers types `to` as taking the model itself


def lora_state_dict(model) -> dict[str, torch.Tensor]:
    """The adapter's `lora_` tensors in peft's saved-adapter key format (what RLinf's loader expects)."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    return {k: v.detach().cpu().contiguous() for k, v in state.items() if "lora_" in k}


def _without_adapter_name(key: str, adapter: str = "default") -> str:
    """`...lora_A.default.weight` (a `model.state_dict()` key, as exports before the fix wrote them) ->
    `...lora_A.weight`."""
    for part in ("lora_A", "lora_B"):
        key = key.replace(f".{part}.{adapter}.", f".{part}.")
    return key


def checkpoint_save(model, folder: str | Path, *, meta: dict) -> Path:
    """Write the adapter and `vlm.json` into `folder` (RLinf's `full_weights.pt`: `rlinf_export.rlinf_export`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # lm_head is a LoRA target (RLinf) but its base weight never changes: keep it out of the adapter
    model.save_pretrained(folder / ADAPTER_DIR, save_embedding_layers=False)
    (folder / META_FILE).write_text(json.dumps({"kind": "vlm", "labels": list(LABELS), **meta}, indent=2))
    return folder


def checkpoint_meta(folder: str | Path) -> dict:
    folder = Path(folder)
    meta_path = folder / META_FILE
    if meta_path.is_file():
        return json.loads(meta_path.read_text())
    if (folder / "config.json").is_file():
        return {"kind": "vlm", "base_model_path": str(folder), "labels": list(LABELS)}
    raise FileNotFoundError(f"{folder} holds neither a VLM checkpoint ({META_FILE}) nor a model (config.json)")


def base_model_find(meta: dict) -> str:
    """The base model folder a checkpoint names, or this machine's default Qwen3-VL folder when the
    named one is absent (a checkpoint trained on another machine)."""
    from .config import default_base_model_path

    named = meta["base_model_path"]
    if (Path(named) / "config.json").is_file():
        return named
    fallback = default_base_model_path()
    if (Path(fallback) / "config.json").is_file():
        return fallback
    raise FileNotFoundError(
        f"base model {named!r} of this checkpoint is not on this machine, nor is the default {fallback!r}: "
        "copy the Qwen3-VL model folder there"
    )


def checkpoint_load(folder: str | Path, *, base_model_path: str | None = None, device: str = "auto", bf16: bool = True):
    """(model, processor, meta): the base model with the folder's adapter applied (if it has one)."""
    from peft import PeftModel

    folder = Path(folder)
    meta = checkpoint_meta(folder)
    model, processor = base_load(base_model_path or base_model_find(meta), device=device, bf16=bf16)
    if (folder / ADAPTER_DIR).is_dir():
        model = PeftModel.from_pretrained(model, folder / ADAPTER_DIR, is_trainable=False)
    return model.eval(), processor, meta


def full_weights_load(model, path: str | Path) -> None:
    """Load RLinf-style `full_weights.pt` (lora_ keys) into a PEFT model built as RLinf builds it (the same ranks and
    targets, `lora_alpha` = rank: the file's `lora_B` carries the adapter's own scale). Files written before the
    key fix (adapter name in the keys) load too."""
    import torch
    from peft import set_peft_model_state_dict

    state = torch.load(path, map_location="cpu", weights_only=True)
    bad = [k for k in state if "lora_" not in k]
    if bad:
        raise ValueError(f"full_weights.pt holds non-LoRA keys, e.g. {bad[:3]}")
    state = {_without_adapter_name(k): v for k, v in state.items()}
    expected = set(lora_state_dict(model))
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise ValueError(f"LoRA keys do not match: missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}")
    set_peft_model_state_dict(model, state)
