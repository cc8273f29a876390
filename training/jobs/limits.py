"""What a training job may ask of this machine, checked when it is submitted (400 with the reason) and
again when a worker starts it: processes per node (training.kit.parallel_config.processes_limit), CPU
threads and the first batch's memory (`host_check`: TRAINING_HOST_CPUS, TRAINING_MAX_BATCH_BYTES) and the
model files it names (inside MODEL_DIR, training.jobs.model_paths)."""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings

from ..kit.parallel_config import processes_error, processes_limit
from .model_paths import confined, relative_name

logger = logging.getLogger(__name__)

__all__ = [
    "batch_bytes",
    "host_check",
    "host_processes_limit",
    "host_processes_error",
    "job_config_check",
    "paths_confine",
    "processes_check",
    "processes_error",
]


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


def host_processes_error(processes: Any) -> str | None:
    """Why `processes` per node is more than this host allows (None when it is not). Every host allows one, so
    a one-process job (the default) is answered without counting GPUs: the first count in a process imports
    torch in a child (about 6 s), which made "Queue job" take 5.9 s."""
    if processes is None or (isinstance(processes, int) and not isinstance(processes, bool) and processes <= 1):
        return None
    return processes_error(processes, host_processes_limit(), configured=settings.TRAINING_MAX_PROCESSES > 0)


def processes_check(config: dict[str, Any]) -> None:
    """ValueError when the config asks for more processes per node than this host allows."""
    error = host_processes_error(config.get("processes", 1))
    if error:
        raise ValueError(error)


def batch_bytes(config: dict[str, Any]) -> int:
    """A lower bound of the memory a training step holds: the float32 input batch (batch_size x C x H x W x
    4 bytes), before any activation; 0 for a config without a batch_size and image_size."""
    size, batch = config.get("image_size"), config.get("batch_size")
    if not isinstance(batch, int) or not isinstance(size, list | tuple) or len(size) != 3:
        return 0
    channels, height, width = (int(v) for v in size)
    return batch * channels * height * width * 4


def host_check(config: dict[str, Any]) -> None:
    """ValueError naming the setting when the job asks for more CPU threads than the training host has or its
    first batch needs more memory than a job may take."""
    threads, cores = config.get("num_threads") or 0, settings.TRAINING_HOST_CPUS
    if isinstance(threads, int) and threads > cores:
        raise ValueError(
            f"num_threads {threads} is more than the training host's {cores} CPU cores "
            f"(TRAINING_HOST_CPUS); ask for at most {cores}, or 0 for the worker's default"
        )
    needed, limit = batch_bytes(config), settings.TRAINING_MAX_BATCH_BYTES
    if needed > limit:
        raise ValueError(
            f"batch_size {config['batch_size']} x image_size {config['image_size']} needs at least "
            f"{needed / 1024**3:.1f} GiB for its first batch (float32 input alone); the limit is "
            f"{limit / 1024**3:.1f} GiB (TRAINING_MAX_BATCH_BYTES): lower batch_size or image_size"
        )


def paths_confine(kind: str, config: dict[str, Any], *, must_exist: bool = True) -> dict[str, Any]:
    """The config with its model paths resolved inside MODEL_DIR; ValueError (naming the field, never the
    file system outside MODEL_DIR) for a path outside it or, with `must_exist`, one that is not what the field
    needs (a worker's check; the web's too unless TRAINING_MODELS_ON_WEB is off: the models on other machines)."""
    model_dir = Path(settings.MODEL_DIR)
    out = dict(config)
    if kind == "resnet" and out.get("pretrained_path"):
        path = confined(out["pretrained_path"], model_dir, field="pretrained_path")
        if must_exist and not path.is_file():
            raise ValueError(f"pretrained_path {relative_name(path, model_dir)!r} is not a file in the model folder")
        out["pretrained_path"] = str(path)
    if kind == "vlm":
        path = confined(out.get("base_model_path") or "qwen3-vl", model_dir, field="base_model_path")
        shown = relative_name(path, model_dir)
        if must_exist and not path.is_dir():
            raise ValueError(
                f"base_model_path {shown!r} is not a folder in the model folder: download a Qwen3-VL model (e.g. "
                "Qwen3-VL-4B-Instruct) into it; nothing is fetched at run time"
            )
        if must_exist and not (path / "config.json").is_file():
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
    this host's limit, threads and first batch within the training host (`host_check`). ValueError with the
    reason otherwise. Workers resolve the paths again (`paths_confine`) when they run the job, and fail it with
    the same reason when a model is not in their MODEL_DIR."""
    from ..families import validate_config  # the model families load torch: only where jobs are made or run

    if not isinstance(config, dict):
        raise ValueError("config must be a JSON object")
    normalised = validate_config(kind, paths_confine(kind, config, must_exist=settings.TRAINING_MODELS_ON_WEB))
    processes_check(normalised)
    host_check(normalised)
    return paths_relative(kind, normalised)
