"""The `vlm` job kind: LoRA fine-tuning of Qwen3-VL on a snapshot's trend dataset (Celery, queue `training`).

Registered in `training.families`; `training.services.job_execute` calls `run_job(job, reporter)`.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings

from common.filestore.services import work_folder_resume
from training.kit import distributed
from training.kit.family_parts import RunResult
from training.kit.resume import state_clear
from training.storage import local_path, resume_state_copy_drop, resume_state_share

from .config import VLMTrainConfig, model_folder_check
from .data import trend_split_load
from .train import EVALUATION_FILE, train_vlm

TREND_FOLDER = "trend"


def episode_uuids_by_stem(project) -> dict[str, str]:
    """RLinf episode file stems (as the trend export names them) -> episode UUIDs, for labeling links."""
    from labeling.models import Episode

    out = {}
    for uuid, meta in Episode.objects.filter(project=project).values_list("uuid", "metadata"):
        meta = meta or {}
        name = meta.get("file_name") or meta.get("source_file") or ""
        if name:
            out[str(name).rsplit("/", 1)[-1].removesuffix(".pkl")] = str(uuid)
        out[f"episode_{uuid}"] = str(uuid)
    return out


def label_link(episode_uuid: str | None, start_step: int | None) -> str | None:
    if not episode_uuid or start_step is None:
        return None
    return f"/episodes/{episode_uuid}/label?step={int(start_step)}"


def run_job(job, reporter) -> RunResult:
    config = VLMTrainConfig.from_dict(job.config)
    model_folder_check(config.base_model_path)  # this worker's MODEL_DIR (the web may have none)
    folder = local_path(job.snapshot.folder) / TREND_FOLDER
    if not (folder / "dataset_info.json").is_file():
        raise ValueError(
            f"snapshot #{job.snapshot.number} has no trend dataset (the project needs two cameras and window labels)"
        )
    train_windows, train_rows = trend_split_load(folder, "train")
    eval_windows, eval_rows = trend_split_load(folder, "eval")
    if not train_windows:
        raise ValueError(f"snapshot #{job.snapshot.number} has no labeled training windows")
    prompts = {row["prompt"] for row in train_rows + eval_rows}
    if len(prompts) != 1:
        raise ValueError("the trend dataset's windows do not share one prompt")
    prompt = prompts.pop()
    stems = episode_uuids_by_stem(job.project)
    for window, row in zip(eval_windows, eval_rows, strict=True):
        uuid = stems.get(row.get("source_episode_path", ""))
        window.meta.update(
            episode_uuid=uuid,
            source_episode_path=row.get("source_episode_path"),
            link=label_link(uuid, window.meta.get("start_step")),
        )
    out_dir = work_folder_resume(job.checkpoint_folder, retried=job.attempt > 1)  # published when the job ends
    resume_state_share(out_dir)  # nodes without a shared disk: rank 0's state (or none) on every node
    reporter.log(f"trend dataset: {len(train_windows)} train / {len(eval_windows)} eval windows from {folder}")
    result = train_vlm(
        config,
        train_windows,
        eval_windows,
        out_dir,
        reporter=reporter,
        prompt=prompt,
        resume=True,  # a job requeued after its worker died goes on from its resume state
        checkpoint_seconds=settings.TRAINING_CHECKPOINT_SECONDS,
    )
    metrics = dict(result["final"])
    evaluation = result["evaluation"]
    if evaluation:
        metrics.update(
            accuracy=evaluation["accuracy"],
            per_class=evaluation["per_class"],
            confusion=evaluation["confusion"],
            evaluation_file=str(Path(job.checkpoint_folder) / EVALUATION_FILE),
        )
    if distributed.current().distributed:
        metrics["distributed"] = distributed.shards_report(result["shards"], out_dir, reporter)
    resume_state_copy_drop(out_dir)  # another node's copy of rank 0's resume state
    if distributed.is_main():
        state_clear(out_dir)  # trained: the folder published is the model, not a resume state
        (out_dir / "dataset.json").write_text(
            json.dumps({"snapshot": job.snapshot.number, "folder": str(folder), "prompt": prompt}, indent=2)
        )
    return RunResult(
        checkpoint_path=job.checkpoint_folder,
        metrics=metrics,
        config={**config.to_dict(), "prompt": prompt},
        name=f"{job.project.name} Qwen3-VL trend job {job.pk}",
    )
