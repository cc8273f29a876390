"""RLinf 0.3.0's view of a VLM checkpoint (no Django): its `full_weights.pt`, written from the saved adapter, and
whether RLinf's `HistoryVLMRewardModel` scores with it as we do.

RLinf's loader (`setup_model` in `rlinf/models/embodiment/reward/vlm_reward_model.py`) rebuilds the LoRA from the
file alone: rank = the first `lora_A`'s rows, `lora_alpha` = rank, dropout 0, `target_modules` = the last name of
each key, then `set_peft_model_state_dict`. So here:
- another scale (`lora_alpha` != rank, rsLoRA) is folded into `lora_B`: RLinf's scale 1 then gives the same update;
- what it cannot rebuild is refused, naming the setting: per-module ranks or alphas, DoRA, tensors it drops (trained
  biases, `modules_to_save`, token or parameter adapters), and a target name that also names a layer its peft
  0.11.1 cannot wrap (it would raise for the whole adapter).
The outcome is recorded in the checkpoint's `vlm.json` under `rlinf`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

RLINF_LORA_PATH = Path("checkpoints") / "best_model"  # RLinf's `reward.model.lora_path`, under the checkpoint
FULL_WEIGHTS = RLINF_LORA_PATH / "actor" / "model_state_dict" / "full_weights.pt"
RECORD_KEY = "rlinf"


def rlinf_wrappable() -> tuple[type, ...]:
    """The layers peft 0.11.1 (RLinf 0.3.0's pin) can put a LoRA on (torch is imported here: the web process,
    which shows the status, never loads it)."""
    import torch

    return (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv2d)


# adapter_config.json settings RLinf's rebuilt LoRA lacks: (key, the values it may have, what RLinf would do)
_SETTINGS: tuple[tuple[str, tuple[Any, ...], str], ...] = (
    ("use_dora", (None, False), "RLinf builds a plain LoRA, so the DoRA magnitudes would be dropped"),
    ("rank_pattern", (None, {}), "RLinf gives every module the first lora_A's rank"),
    ("alpha_pattern", (None, {}), "RLinf gives every module lora_alpha = rank"),
    ("modules_to_save", (None, [], ()), "RLinf loads only lora_ tensors, so these modules would keep the base weights"),
    ("bias", (None, "none"), "RLinf loads only lora_ tensors, so the trained biases would be dropped"),
    ("lora_bias", (None, False), "RLinf's LoRA has no lora_B bias, so it would be dropped"),
    ("target_parameters", (None, [], ()), "RLinf wraps modules, not parameters"),
    (
        "trainable_token_indices",
        (None, [], {}),
        "RLinf loads only lora_ tensors, so the trained tokens would be dropped",
    ),
)


class RlinfExportRefused(ValueError):
    """RLinf would load this adapter differently; the message names each setting."""


def lora_scale(adapter_config: dict) -> float:
    """peft's scale of this adapter: alpha / rank, or alpha / sqrt(rank) with rsLoRA."""
    rank = int(adapter_config["r"])
    alpha = float(adapter_config.get("lora_alpha") or rank)
    return alpha / math.sqrt(rank) if adapter_config.get("use_rslora") else alpha / rank


def setting_refusals(adapter_config: dict) -> list[str]:
    if adapter_config.get("peft_type", "LORA") != "LORA":
        return [f"peft_type={adapter_config['peft_type']!r}: RLinf loads LoRA adapters only"]
    return [
        f"{key}={adapter_config[key]!r}: {why}"
        for key, allowed, why in _SETTINGS
        if adapter_config.get(key) not in allowed
    ]


def rlinf_targets(state: dict[str, torch.Tensor]) -> list[str]:
    """The `target_modules` RLinf's loader derives from the keys (the last name before `.lora_`)."""
    return sorted({key.split(".lora_")[0].split(".")[-1] for key in state if ".lora_" in key})


def tensor_refusals(state: dict[str, torch.Tensor]) -> list[str]:
    reasons = []
    dropped = [key for key in state if "lora_" not in key]
    if dropped:
        reasons.append(f"tensors that are not lora_ (RLinf drops them): {', '.join(sorted(dropped)[:3])}")
    ranks = {int(value.shape[0]) for key, value in state.items() if "lora_A" in key}
    if len(ranks) > 1:
        reasons.append(f"lora_A ranks {sorted(ranks)}: RLinf gives every module the first one's")
    if not ranks:
        reasons.append("the adapter has no lora_A tensors")
    return reasons


def module_kinds(model) -> dict[str, set[str]]:
    """Each module's last name -> the classes of the layers with that name (a LoRA wrapper counts as its base
    layer, so a trained model and its base give the same answer)."""
    kinds: dict[str, set[str]] = {}
    wrappable_types = rlinf_wrappable()
    for name, module in model.named_modules():
        base = getattr(module, "base_layer", module)
        wrappable = isinstance(base, wrappable_types)
        kinds.setdefault(name.rsplit(".", 1)[-1], set()).add("" if wrappable else type(base).__name__)
    return kinds


def module_refusals(targets: list[str], kinds: dict[str, set[str]]) -> list[str]:
    reasons = []
    for name in targets:
        others = sorted(kinds.get(name, set()) - {""})
        if others:
            reasons.append(
                f"target module {name!r} also names a {'/'.join(others)} layer, which RLinf's peft 0.11.1 cannot "
                f"wrap: its loader would raise for the whole adapter (train without {name!r} in target_modules)"
            )
    return reasons


def base_module_kinds(base_model_path: str | Path) -> dict[str, set[str]]:
    """module_kinds of the base model, built on the meta device from its config.json (no weights are read)."""
    import torch
    from transformers import AutoConfig, Qwen3VLForConditionalGeneration

    config = AutoConfig.from_pretrained(base_model_path, local_files_only=True)
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config)
    return module_kinds(model)


def adapter_config_read(folder: Path) -> dict:
    """The checkpoint's `adapter/adapter_config.json` (FileNotFoundError naming the folder when it has none)."""
    from .checkpoint import ADAPTER_DIR

    config_path = folder / ADAPTER_DIR / "adapter_config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{folder} has no LoRA adapter ({ADAPTER_DIR}/adapter_config.json)")
    return json.loads(config_path.read_text())


def adapter_tensors_read(folder: Path) -> dict[str, torch.Tensor]:
    """The adapter's tensors as peft saved them."""
    import torch

    from .checkpoint import ADAPTER_DIR

    adapter = folder / ADAPTER_DIR
    if (adapter / "adapter_model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(adapter / "adapter_model.safetensors")
    return torch.load(adapter / "adapter_model.bin", map_location="cpu", weights_only=True)


def rlinf_export(folder: str | Path, *, model=None) -> dict:
    """Check the checkpoint's adapter against RLinf's loader; when RLinf loads it as we do, write `full_weights.pt`
    (the lora_ tensors keyed as peft saves them, `lora_B` times the adapter's scale), else remove a stale one.
    `model`: the trained model in memory (its layers are checked), else the base model is built on the meta
    device. The outcome, also recorded in `vlm.json`: {loadable, reasons, scale, lora_path, full_weights}."""
    import torch

    from .checkpoint import META_FILE, base_model_find, checkpoint_meta

    folder = Path(folder)
    meta = checkpoint_meta(folder)
    adapter_config, state = adapter_config_read(folder), adapter_tensors_read(folder)
    kinds = module_kinds(model) if model is not None else base_module_kinds(base_model_find(meta))
    reasons = setting_refusals(adapter_config) + tensor_refusals(state)
    reasons += module_refusals(rlinf_targets(state), kinds)
    scale = lora_scale(adapter_config)
    target = folder / FULL_WEIGHTS
    if reasons:
        target.unlink(missing_ok=True)
    else:
        folded = {
            key: (value.float() * scale).to(value.dtype) if "lora_B" in key else value for key, value in state.items()
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save({key: value.contiguous() for key, value in folded.items()}, target)
    record = {
        "loadable": not reasons,
        "reasons": reasons,
        "scale": scale,
        "lora_path": str(RLINF_LORA_PATH),
        "full_weights": str(FULL_WEIGHTS) if not reasons else None,
    }
    if (folder / META_FILE).is_file():
        (folder / META_FILE).write_text(json.dumps({**meta, RECORD_KEY: record}, indent=2))
    return record


def rlinf_export_or_refuse(folder: str | Path) -> dict:
    """rlinf_export, raising RlinfExportRefused (naming every setting) when RLinf would load it differently."""
    record = rlinf_export(folder)
    if not record["loadable"]:
        raise RlinfExportRefused(
            "RLinf 0.3.0 would load this LoRA differently, so no full_weights.pt is written: "
            + "; ".join(record["reasons"])
        )
    return record


def rlinf_status(folder: str | Path) -> dict:
    """What the checkpoint's `vlm.json` recorded at the last export, with whether `full_weights.pt` is there now;
    `checked` False when it was never exported (the adapter's settings are checked all the same; `loadable` None
    when nothing in them stands in the way)."""
    from .checkpoint import checkpoint_meta

    folder = Path(folder)
    try:
        record = checkpoint_meta(folder).get(RECORD_KEY)
        if record is None:
            reasons = setting_refusals(adapter_config_read(folder))
    except FileNotFoundError as exc:
        record, reasons = None, [str(exc)]
    if record is not None:
        return {**record, "checked": True, "present": record["loadable"] and (folder / FULL_WEIGHTS).is_file()}
    return {
        "checked": False,
        "loadable": False if reasons else None,
        "reasons": reasons,
        "scale": None,
        "lora_path": str(RLINF_LORA_PATH),
        "full_weights": None,
        "present": False,
    }
