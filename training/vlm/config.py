"""VLMTrainConfig: everything a Qwen3-VL LoRA trend job needs, validated before the job is queued."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from projects.prompts import DEFAULT_PROMPT_TEMPLATE

from ..kit.parallel_config import DEFAULT_MASTER_PORT, settings_errors
from .layout import DEFAULT_LAYOUT, LAYOUTS
from .prompt import template_check

BALANCE_MODES = ("weight", "sample", "none")
SCHEDULES = ("cosine", "linear", "constant")
DEVICES = ("auto", "cpu", "cuda")
LORA_INITS = ("gaussian", "default")

# RLinf's LoRA targets (`rlinf/models/__init__.py`, the `LoraConfig` built when `is_lora`): the vision
# tower, the language model and `lm_head`. Names the model lacks are skipped at wrap time, and so is a name that
# also names a layer RLinf's peft 0.11.1 cannot wrap (`proj`: Qwen3-VL's `patch_embed.proj` is a Conv3d; see
# train.py `lora_targets`).
RLINF_LORA_TARGETS = (
    "proj",
    "qkv",
    "fc1",
    "fc2",
    "q",
    "kv",
    "fc3",
    "out_proj",
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "lm_head",
)


def default_target_modules() -> list[str]:
    return list(RLINF_LORA_TARGETS)


def default_base_model_path() -> str:
    """`settings.MODEL_DIR / "qwen3-vl"` when Django is configured, else `$MODEL_DIR/qwen3-vl`."""
    try:
        from django.conf import settings

        if settings.configured:
            return str(Path(settings.MODEL_DIR) / "qwen3-vl")
    except ImportError:  # pragma: no cover - Django is always installed here
        pass
    return str(Path(os.environ.get("MODEL_DIR", "data/models")) / "qwen3-vl")


def model_folder_check(path: str) -> None:
    """ValueError naming the problem when `path` is not a local Hugging Face model folder."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(
            f"base_model_path {path!r} does not exist: download a Qwen3-VL model (e.g. Qwen3-VL-4B-Instruct) "
            "into that folder or set base_model_path; nothing is fetched at run time"
        )
    if not (folder / "config.json").is_file():
        raise ValueError(f"base_model_path {path!r} has no config.json, so it is not a model folder")


@dataclass
class VLMTrainConfig:
    base_model_path: str = ""
    # LoRA (RLinf recipe, rlinf/models/__init__.py: rank 16, alpha = rank (None), dropout 0, gaussian init). Another
    # alpha is served as trained and exported to RLinf (which loads alpha = rank) with lora_B scaled to match.
    lora_rank: int = 16
    lora_alpha: int | None = None
    lora_dropout: float = 0.0
    target_modules: list[str] = field(default_factory=default_target_modules)
    lora_init: str = "gaussian"
    # Optimisation (RLinf recipe, qwen3vl_sft_vlm_trend_reward.yaml: lr 1e-5 cosine, 50 warmup steps,
    # 3000 steps, global batch 8, weight decay 0.01, per-label sample reweighting = balance "weight")
    lr: float = 1e-5
    weight_decay: float = 0.01
    schedule: str = "cosine"
    warmup_steps: int = 50
    max_steps: int = 3000
    batch_size: int = 1
    grad_accum: int = 8
    grad_clip: float = 1.0
    balance: str = "weight"
    eval_every: int = 100
    seed: int = 42
    device: str = "auto"
    bf16: bool = True
    num_threads: int = 0  # torch CPU threads while the job runs (0: leave the process's setting)
    gradient_checkpointing: bool = False  # trade compute for memory (large models on small GPUs)
    # Prompt (a model must be served with the prompt it was trained on)
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    task: str = ""
    window_size: int = 5
    # How the processor sees a window: "video" (RLinf's two videos) or "images" (separate images)
    input_layout: str = DEFAULT_LAYOUT
    # Images: optional pixel bounds passed to the processor (None keeps the model folder's own)
    min_pixels: int | None = None
    max_pixels: int | None = None
    # RLinf's full_weights.pt beside the adapter (training/vlm/rlinf_export.py; `manage.py export_rlinf_vlm`
    # writes it later for a model trained with this off)
    save_full_weights: bool = True
    # data-parallel under torchrun (training.kit.distributed): processes per node (one per GPU) x nodes
    processes: int = 1
    nodes: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT

    def __post_init__(self) -> None:
        errors = []
        if not self.base_model_path:
            self.base_model_path = default_base_model_path()
        self.base_model_path = str(self.base_model_path)
        if self.lora_alpha is None:
            self.lora_alpha = self.lora_rank
        positive_ints = (
            "lora_rank",
            "lora_alpha",
            "max_steps",
            "batch_size",
            "grad_accum",
            "eval_every",
            "window_size",
        )
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                errors.append(f"{name} must be a positive integer, got {value!r}")
        for name in ("lora_dropout", "lr", "weight_decay", "grad_clip"):
            try:
                setattr(self, name, float(getattr(self, name)))
            except (TypeError, ValueError):
                errors.append(f"{name} must be a number, got {getattr(self, name)!r}")
                setattr(self, name, 0.0)
        if not isinstance(self.num_threads, int) or isinstance(self.num_threads, bool) or self.num_threads < 0:
            errors.append(f"num_threads must be an integer >= 0, got {self.num_threads!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            errors.append(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not 0.0 <= float(self.lora_dropout) < 1.0:
            errors.append(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if not 0.0 < float(self.lr) < 1.0:
            errors.append(f"lr must be in (0, 1), got {self.lr!r}")
        if float(self.weight_decay) < 0 or float(self.grad_clip) < 0:
            errors.append("weight_decay and grad_clip must be >= 0")
        if (
            isinstance(self.target_modules, str)
            or not self.target_modules
            or not all(isinstance(m, str) and m for m in self.target_modules)
        ):
            errors.append("target_modules must be a non-empty list of module names")
        choices = (
            ("schedule", SCHEDULES),
            ("balance", BALANCE_MODES),
            ("device", DEVICES),
            ("input_layout", LAYOUTS),
            ("lora_init", LORA_INITS),
        )
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                errors.append(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("min_pixels", "max_pixels"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                errors.append(f"{name} must be a positive integer or null")
        errors += settings_errors(self.processes, self.nodes, self.master_addr, self.master_port)
        try:
            template_check(self.prompt_template)
        except ValueError as exc:
            errors.append(str(exc))
        if errors:
            raise ValueError("; ".join(errors))

    @classmethod
    def from_dict(cls, data: dict) -> VLMTrainConfig:
        """A validated config. Whether its base model folder exists is the machine's question, not the
        config's: `model_folder_check` on the worker that runs it (and `paths_confine` at submission where the
        web has the models, TRAINING_MODELS_ON_WEB)."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown VLM config keys: {', '.join(sorted(unknown))}")
        try:
            config = cls(**data)
        except TypeError as exc:
            raise ValueError(f"bad VLM config: {exc}") from None
        return config

    def to_dict(self) -> dict:
        return asdict(self)
