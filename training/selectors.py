"""Reads for the training app: the labels a snapshot takes, jobs, models and their curves, and a job's state
as the pages, the API and the WebSocket show it."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from common.jobs.payload import job_progress_payload
from labeling.labels.selectors import effective_frame_label_steps, effective_frame_labels, effective_window_labels
from labeling.models import Episode, Frame, FrameLabel, Step
from projects.models import Project
from training.evaluation.model_evaluation import model_sanity

from .datasets.rlinf_binary import FAIL, SUCCESS, FrameRef
from .datasets.trend import WindowRef
from .models import DatasetSnapshot, JobMetric, TrainedModel, TrainingJob
from .page_data import JobState


def _episode_stem(episode: Episode) -> str:
    meta = episode.metadata or {}
    name = meta.get("file_name") or meta.get("source_file") or ""
    if name:
        return str(name).rsplit("/", 1)[-1].removesuffix(".pkl")
    return f"episode_{episode.uuid}"


def labeled_frames(*, project: Project, sources: list[str], camera: str) -> tuple[list[list[FrameRef]], list[dict]]:
    """Per episode (oldest first), the labeled frames of `camera` in step order, one label per step:
    a human label wins over a proposal, a proposal over a model label; rejected labels never count.
    Also the manifest rows (who labeled what, when)."""
    best = effective_frame_labels(project=project, sources=sources)
    # The labeled steps as a subquery, not a list of ids: a million-frame project would send 100,000s of them.
    labeled_steps = effective_frame_label_steps(project=project, sources=sources)
    images = dict(Frame.objects.filter(step_id__in=labeled_steps, camera=camera).values_list("step_id", "image"))
    steps = Step.objects.filter(pk__in=labeled_steps).values("pk", "index", "episode_id")
    episodes = {e.pk: e for e in Episode.objects.filter(project=project).order_by("created_at", "pk")}
    per_episode: dict[int, list[tuple[int, FrameRef, dict]]] = defaultdict(list)
    for step in steps:
        image = images.get(step["pk"])
        if not image:
            continue
        row = best[step["pk"]]
        episode = episodes[step["episode_id"]]
        ref = FrameRef(
            episode=str(episode.uuid),
            step=step["index"],
            label=SUCCESS if row["value"] == FrameLabel.Value.SUCCESS else FAIL,
            image=image,
            source=row["source"],
        )
        manifest = {
            "episode": str(episode.uuid),
            "step": step["index"],
            "value": row["value"],
            "source": row["source"],
            "author": row["author__username"] or row["agent__name"] or "",
            "labeled_at": row["updated_at"].isoformat(),
        }
        per_episode[episode.pk].append((step["index"], ref, manifest))
    ordered: list[list[FrameRef]] = []
    manifest_rows: list[dict] = []
    for pk in episodes:
        if pk in per_episode:
            items = sorted(per_episode[pk], key=lambda item: item[0])
            ordered.append([ref for _, ref, _ in items])
            manifest_rows.extend(m for _, _, m in items)
    return ordered, manifest_rows


def pinned_episode_splits(*, project: Project) -> dict[str, str]:
    """Episode uuid -> "train" / "val" for episodes imported from an RLinf `train.pt` / `val.pt` payload
    (they keep the split they were exported with)."""
    from .datasets.binary_split import payload_split_of

    out = {}
    for uuid, meta in Episode.objects.filter(project=project, metadata__format="rlinf_reward_payload").values_list(
        "uuid", "metadata"
    ):
        split = payload_split_of(str((meta or {}).get("file_name") or ""))
        if split:
            out[str(uuid)] = split
    return out


def labeled_windows(*, project: Project, sources: list[str], views: tuple[str, str]) -> tuple[list[WindowRef], str]:
    """Window labels with both views' frame names (human over proposal for the same span); the score name."""
    best = effective_window_labels(project=project, sources=sources)
    episode_ids = {key[0] for key in best}
    episodes = {e.pk: e for e in Episode.objects.filter(pk__in=episode_ids)}
    steps = Step.objects.filter(episode_id__in=episode_ids).values("pk", "episode_id", "index", "reward", "score")
    step_info: dict[tuple[int, int], Any] = {(s["episode_id"], s["index"]): s for s in steps}
    uses_gae = any(s["score"] is not None for s in step_info.values())
    frames: dict[tuple[int, str], str] = {
        (step_id, camera): image
        for step_id, camera, image in Frame.objects.filter(
            step__episode_id__in=episode_ids, camera__in=views
        ).values_list("step_id", "camera", "image")
    }
    order = sorted(best.values(), key=lambda r: (episodes[r["episode_id"]].created_at, r["episode_id"], r["start"]))
    windows = []
    for row in order:
        episode = episodes[row["episode_id"]]
        span: list[Any] = [step_info.get((episode.pk, i)) for i in range(row["start"], row["end"] + 1)]
        if any(s is None for s in span):
            continue
        main = tuple(frames.get((s["pk"], views[0]), "") for s in span)
        extra = tuple(frames.get((s["pk"], views[1]), "") for s in span)
        if not all(main) or not all(extra):
            continue  # a window missing a view is skipped (as RLinf does)
        meta = episode.metadata or {}
        windows.append(
            WindowRef(
                episode=str(episode.uuid),
                episode_stem=_episode_stem(episode),
                start=row["start"],
                end=row["end"],
                label=row["value"],
                main_images=main,
                extra_images=extra,
                source=row["source"],
                start_score=_score(span[0]),
                end_score=_score(span[-1]),
                episode_id=meta.get("episode_id"),
                env_idx=meta.get("env_idx"),
                success=episode.success,
            )
        )
    return windows, "gae" if uses_gae else "rewards"


def _score(step: dict) -> float:
    return float(step["score"]) if step["score"] is not None else float(step["reward"])


def snapshots_for_project(project: Project) -> QuerySet[DatasetSnapshot]:
    return DatasetSnapshot.objects.filter(project=project).select_related("created_by").order_by("-number")


def jobs_for_project(project: Project) -> QuerySet[TrainingJob]:
    return TrainingJob.objects.filter(project=project).select_related("snapshot", "created_by").order_by("-created_at")


def models_for_project(project: Project) -> QuerySet[TrainedModel]:
    return TrainedModel.objects.filter(project=project).select_related("job", "snapshot").order_by("-created_at")


def job_history(job_id: int) -> list[dict]:
    return [
        {"kind": p.kind, "step": p.step, "epoch": p.epoch, **p.values}
        for p in JobMetric.objects.filter(job_id=job_id).order_by("kind", "step", "pk")
    ]


def label_queue_empty_reason(*, project: Project) -> str:
    """Why the project's labeling queue is empty, in words that say what to do next."""
    from labeling.labels.selectors import human_labeled_steps

    from .models import ModelKind

    if not Step.objects.filter(episode__project=project).exists():
        return "Nothing to label yet: this project has no episodes."
    if not Step.objects.filter(episode__project=project).exclude(pk__in=human_labeled_steps(project=project)).exists():
        return "Every frame of this project has a human label: nothing is left to queue."
    if not TrainedModel.objects.filter(project=project, kind=ModelKind.RESNET).exists():
        return "Nothing queued yet: the queue is ranked by a ResNet model, and this project has none. Train one."
    return "Nothing queued yet: recompute the queue to rank the unlabeled frames with the newest model."


def job_state(job_id: int) -> JobState | None:
    job = TrainingJob.objects.filter(pk=job_id).select_related("snapshot").first()
    return None if job is None else job_state_of(job)


def job_state_of(job: TrainingJob) -> JobState:
    models = list(TrainedModel.objects.filter(job_id=job.pk).select_related("snapshot"))
    return {
        **job_progress_payload(job),
        "job": job.pk,
        "kind": job.kind,
        "cancel_requested": job.cancel_requested,
        "eta_seconds": job.eta_seconds,
        "log": job.log[-20000:],
        "summary": job.summary,
        "models": [model.pk for model in models],
        "epochs": (job.config or {}).get("epochs"),
        "sanity": [finding for model in models for finding in model_sanity(model, compute=False)],
    }
