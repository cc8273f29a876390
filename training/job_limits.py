"""What a training job may ask of this machine, checked when it is submitted (400 with the reason) and
again when a worker starts it: processes per node (training.parallel_config.processes_limit) and the
model files it names (inside MODEL_DIR, training.model_paths)."""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings

from .model_paths import confined, relative_name
from .parallel_config import processes_error, processes_limit

logger = logging.getLogger(__name__)

__all__ = ["host_processes_limit", "job_config_check", "paths_confine", "processes_check", "processes_error"]


GPU_COUNT = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"


@functools.cache
def host_gpus() -> int:
    """CUDA devices this process can use (0 without CUDA); counted once per process. A process that has not
    imported torch (the web process, which checks a job's settings when it is submitted) asks a short-lived
    Python: importing torch to count GPUs kept about 540 MiB in the web process for good."""
    if "torch" in sys.modules:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        counted = subprocess.run(
            [sys.executable, "-c", GPU_COUNT], capture_output=True, text=True, timeout=300, check=True
        )
        return int(counted.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        logger.warning("could not count this host's GPUs; taking none", exc_info=True)
        return 0


def host_processes_limit() -> int:
    return processes_limit(settings.TRAINING_MAX_PROCESSES, host_gpus())


def processes_check(config: dict[str, Any]) -> None:
    """ValueError when the config asks for more processes per node than this host allows."""
    error = processes_error(
        config.get("processes", 1), host_processes_limit(), configured=settings.TRAINING_MAX_PROCESSES > 0
    )
    if error:
        raise ValueError(error)


def paths_confine(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """The config with its model paths resolved inside MODEL_DIR; ValueError (naming the field, never the
    file system outside MODEL_DIR) for a path outside it or one that is not what the field needs."""
    model_dir = Path(settings.MODEL_DIR)
    out = dict(config)
    if kind == "resnet" and out.get("pretrained_path"):
        path = confined(out["pretrained_path"], model_dir, field="pretrained_path")
        if not path.is_file():
            raise ValueError(f"pretrained_path {relative_name(path, model_dir)!r} is not a file in the model folder")
        out["pretrained_path"] = str(path)
    if kind == "vlm":
        path = confined(out.get("base_model_path") or "qwen3-vl", model_dir, field="base_model_path")
        shown = relative_name(path, model_dir)
        if not path.is_dir():
            raise ValueError(
                f"base_model_path {shown!r} is not a folder in the model folder: download a Qwen3-VL model (e.g. "
                "Qwen3-VL-4B-Instruct) into it; nothing is fetched at run time"
            )
        if not (path / "config.json").is_file():
            raise ValueError(f"base_model_path {shown!r} has no config.json, so it is not a model folder")
        out["base_model_path"] = str(path)
    return out


def paths_relative(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """The config with its (confined) model paths relative to MODEL_DIR, as jobs store and show them."""
    model_dir = Path(settings.MODEL_DIR)
    return {
        key: relative_name(Path(value), model_dir) if key in PATH_FIELDS.get(kind, ()) and value else value
        for key, value in config.items()
    }


PATH_FIELDS = {"resnet": ("pretrained_path",), "vlm": ("base_model_path",)}


def job_config_check(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """The config a job of `kind` is stored with: validated for its kind (defaults filled in) with its model
    paths confined to MODEL_DIR (stored relative to it: no server path shows on a page), processes within
    this host's limit. ValueError with the reason otherwise. Workers resolve the paths again
    (`paths_confine`) when they run the job."""
    from .runners import validate_config  # the model families load torch: only where jobs are made or run

    if not isinstance(config, dict):
        raise ValueError("config must be a JSON object")
    normalised = validate_config(kind, paths_confine(kind, config))
    processes_check(normalised)
    return paths_relative(kind, normalised)
