"""Writes for dataset snapshots: numbering, building the files (in a Celery task for pages and the API,
with progress recorded on the row), the downloadable archive."""

from __future__ import annotations

import json
import logging
import shutil
import time
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from common.filestore.services import folder_published, stored_folder_delete, work_folder, work_folder_drop
from common.images.checks import PNG_SIGNATURE, ImageError, check_png, decode_rgb, encode_array
from common.jobs.services import JobHeartbeat, job_claim, job_finish, job_progress
from common.zip_stream import zip_folder_blocks
from projects.models import Project
from webhooks import events
from webhooks.services import webhook_emit_safely

from .. import selectors
from ..datasets.binary_split import SplitPlan, leak_warning, missing_classes, plan_split, shared_episodes
from ..datasets.options import SnapshotOptions
from ..datasets.rlinf_binary import (
    BinaryOptions,
    BinarySplit,
    FrameRef,
    payload_metadata,
    realworld_metadata,
    write_payload,
)
from ..datasets.trend import TrendOptions, eval_warning, split_windows, write_trend_dataset
from ..jobs.errors import failure_reason
from ..models import DatasetSnapshot
from ..storage import local_path
from .quota import QuotaExceeded, quota_build_check, quota_room_check

logger = logging.getLogger(__name__)
T = TypeVar("T")
T_in = TypeVar("T_in")


class SnapshotError(ValueError):
    """A snapshot that cannot be built from the project's labels; the message says why."""


class BuildSuperseded(RuntimeError):
    """This build no longer owns its snapshot (finished, deleted, or taken over by a requeued build)."""


def snapshot_create(
    *, project: Project, options: dict | None = None, created_by=None, build: bool = True
) -> DatasetSnapshot:
    """Number a new snapshot of the project and (by default) build its files now."""
    opts = SnapshotOptions.from_dict(options or {})
    quota_room_check(project=project)  # SnapshotError (400) when its snapshots already fill the quota
    if not opts.camera:
        opts.camera = (project.camera_views or ["main"])[0]
    if opts.camera not in (project.camera_views or []):
        raise SnapshotError(f"camera {opts.camera!r} is not one of the project's cameras {project.camera_views}")
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        number = (DatasetSnapshot.objects.filter(project=project).aggregate(n=Max("number"))["n"] or 0) + 1
        snapshot = DatasetSnapshot.objects.create(
            project=project,
            number=number,
            options=opts.to_dict(),
            folder=f"snapshots/project_{project.pk}/snapshot_{number}",
            created_by=created_by,
        )
    if build:
        snapshot_build(snapshot_id=snapshot.pk)
        snapshot.refresh_from_db()
    return snapshot


def snapshot_start(*, project: Project, options: dict | None = None, created_by=None) -> DatasetSnapshot:
    """Number a new snapshot (options checked now) and queue its build (`training.tasks.build_snapshot`) once
    the surrounding transaction commits; the row stays `building` with its progress until the task ends."""
    snapshot = snapshot_create(project=project, options=options, created_by=created_by, build=False)
    transaction.on_commit(lambda: snapshot_enqueue(snapshot_id=snapshot.pk))
    return snapshot


def snapshot_enqueue(*, snapshot_id: int) -> None:
    """Send the build's message (again, for a requeued build or a lost message); the newest task id is kept."""
    from ..tasks import build_snapshot

    result = build_snapshot.apply_async(args=[snapshot_id], queue=settings.CELERY_QUEUE_DEFAULT)
    DatasetSnapshot.objects.filter(pk=snapshot_id).update(celery_task_id=result.id, enqueued_at=timezone.now())


class BuildProgress:
    """Counts the frames a build writes and stores the count, with the build's heartbeat, on the row every
    `every` frames or `seconds`. Raises BuildSuperseded once the row is no longer this build's (`attempt`)."""

    def __init__(self, snapshot_id: int, total: int, *, attempt: int, every: int = 4096, seconds: float = 0.5):
        self.snapshot_id, self.total, self.every, self.seconds = snapshot_id, total, every, seconds
        self.attempt = attempt
        self.done = self._saved = 0
        self._saved_at = time.monotonic()
        self._store()

    def counting(self, load: Callable[[T_in], T], *, count: bool = True) -> Callable[[T_in], T]:
        """`load` that counts a written frame per call (or, with count=False, only keeps the heartbeat)."""

        def counted(ref: T_in) -> T:
            out = load(ref)
            self.done += count
            if self.done - self._saved >= self.every or time.monotonic() - self._saved_at >= self.seconds:
                self._store()
            return out

        return counted

    def _store(self) -> None:
        self._saved, self._saved_at = self.done, time.monotonic()
        done = min(self.done, self.total)
        stored = job_progress(
            DatasetSnapshot,
            pk=self.snapshot_id,
            attempt=self.attempt,
            progress=done / self.total if self.total else 0.0,
            frames_done=done,
            frames_total=self.total,
        )
        if not stored:
            raise BuildSuperseded(f"snapshot {self.snapshot_id} is no longer built by this task")


def _build_claim(snapshot_id: int) -> int | None:
    """Start a build of a snapshot still building, unless another build of it is alive (a duplicate
    message); the new attempt number, or None."""
    alive_after = timezone.now() - timedelta(seconds=settings.SNAPSHOT_STALE_AFTER_SECONDS)
    no_live_build = Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=alive_after)
    return job_claim(DatasetSnapshot, pk=snapshot_id, where=no_live_build, frames_done=0, progress=0.0)


def snapshot_build(*, snapshot_id: int) -> str:
    """Write the snapshot's files; the row becomes ready (immutable) or failed with the reason.

    Idempotent: a snapshot already ready or failed (or deleted) is left alone and its status returned, and
    so is one whose build is alive elsewhere (a duplicate message); one still building whose build went
    silent (a worker lost mid-build, requeued by the job sweep) is built again from an empty
    folder, and the silent build stops at its next progress write if it comes back."""
    snapshot = DatasetSnapshot.objects.select_related("project").filter(pk=snapshot_id).first()
    if snapshot is None:
        return "deleted"
    if snapshot.status != DatasetSnapshot.Status.BUILDING:
        return snapshot.status
    attempt = _build_claim(snapshot_id)
    if attempt is None:
        return snapshot.status
    folder = work_folder(snapshot.folder)  # MEDIA_ROOT's own with local storage; published below otherwise
    try:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        with build_heartbeat(snapshot_id, attempt=attempt):
            stats = _write_files(snapshot, folder, attempt)
            folder_published(snapshot.folder)  # complete in storage before the row says ready
        work_folder_drop(snapshot.folder)
    except BuildSuperseded:
        return _status_or_deleted(snapshot_id, folder)
    except Exception as exc:
        shutil.rmtree(folder, ignore_errors=True)
        told = isinstance(exc, SnapshotError | QuotaExceeded)  # a reason for users as it is
        message = str(exc) if told else failure_reason(exc)  # one line for users
        if not told:
            logger.exception("snapshot %s failed", snapshot_id)  # the traceback: in the worker's log only
        failed = DatasetSnapshot.Status.FAILED
        if not job_finish(DatasetSnapshot, pk=snapshot_id, attempt=attempt, status=failed, error=message):
            return _status_or_deleted(snapshot_id, folder)
        return DatasetSnapshot.Status.FAILED
    ready = job_finish(
        DatasetSnapshot,
        pk=snapshot_id,
        attempt=attempt,
        status=DatasetSnapshot.Status.READY,
        stats=stats,
        frames_done=F("frames_total"),
    )
    if not ready:
        return _status_or_deleted(snapshot_id, folder)
    snapshot_data = {"snapshot": {"id": snapshot_id, "number": snapshot.number, "stats": stats}}
    webhook_emit_safely(project_id=snapshot.project_id, event=events.SNAPSHOT_READY, data=snapshot_data)
    return DatasetSnapshot.Status.READY


def build_heartbeat(snapshot_id: int, *, attempt: int) -> JobHeartbeat:
    """Keeps a build's heartbeat fresh from a thread every JOBS_HEARTBEAT_SECONDS (`JobHeartbeat`), also while
    the build writes nothing for minutes (a large `torch.save`, a slow disk); it stops with the process, so a
    killed worker's build goes stale and the sweep requeues it."""
    return JobHeartbeat(DatasetSnapshot, snapshot_id, attempt=attempt, interval=float(settings.JOBS_HEARTBEAT_SECONDS))


def _status_or_deleted(snapshot_id: int, folder: Path) -> str:
    """The status of a snapshot this build no longer owns; a snapshot deleted meanwhile takes its files along."""
    status = DatasetSnapshot.objects.filter(pk=snapshot_id).values_list("status", flat=True).first()
    if status is None:
        shutil.rmtree(folder, ignore_errors=True)
        return "deleted"
    return status


class _FrameCache:
    """Decoded frames by storage name, the most recently used of them up to `budget_pixels` (at least one):
    a trend window shares frames with its neighbours (each frame is read once per window), but a project's
    frames need not fit in memory."""

    def __init__(self, budget_pixels: int):
        self.budget_pixels = budget_pixels
        self.held = 0
        self._cache: OrderedDict[str, Any] = OrderedDict()

    def load(self, name: str):
        if name in self._cache:
            self._cache.move_to_end(name)
            return self._cache[name]
        with default_storage.open(name, "rb") as fh:
            array = decode_rgb(fh.read())
        self._cache[name] = array
        self.held += _pixels(array)
        while self.held > self.budget_pixels and len(self._cache) > 1:
            self.held -= _pixels(self._cache.popitem(last=False)[1])
        return array

    def load_frame(self, ref: FrameRef):
        return self.load(ref.image)


def _pixels(array) -> int:
    return int(array.shape[0]) * int(array.shape[1])


def _undecodable(names: list[str], skipped: dict[str, str], tick: Callable[[str], None]) -> set[str]:
    """The `names` of stored frames that cannot be read or will not decode, their reasons added to
    `skipped` (names already there are not checked again). PNGs are checked by inflating their data
    (check_png, cheaper than decoding), JPEGs by decoding them; each is logged."""
    for name in names:
        if name in skipped:
            continue
        tick(name)
        try:
            with default_storage.open(name, "rb") as fh:
                raw = fh.read()
            if raw.startswith(PNG_SIGNATURE):
                check_png(raw, max_side=1 << 16, max_pixels=1 << 34)  # stored frames passed ingest's size limits
            else:
                decode_rgb(raw)
        except ImageError as exc:
            skipped[name] = str(exc)
        except OSError as exc:
            skipped[name] = f"unreadable file: {exc.__class__.__name__}: {exc}"
        else:
            skipped[name] = ""
            continue
        logger.warning("snapshot: frame %s skipped: %s", name, skipped[name])
    return {name for name in names if skipped[name]}


def _skipped_stats(skipped: dict[str, str], limit: int = 20) -> dict:
    bad = [{"frame": name, "reason": reason} for name, reason in skipped.items() if reason]
    return {"count": len(bad), "frames": bad[:limit]}


def _write_files(snapshot: DatasetSnapshot, folder: Path, attempt: int) -> dict:
    """Write the snapshot's files into `folder` (the payloads, their indexes, the PNG folders and the trend
    dataset when asked, snapshot.json) from the project's readable labeled frames; their stats."""
    opts = SnapshotOptions.from_dict(snapshot.options)
    skipped: dict[str, str] = {}
    episodes, manifest = _readable_frames(snapshot, opts, skipped, attempt)
    binary = opts.binary()
    plan = _split_plan(snapshot.project, episodes, binary, opts)
    split = plan.split
    quota_build_check(snapshot=snapshot, images=[ref.image for ref in split.train + split.val])
    frames = _FrameCache(settings.BACKGROUND_DECODE_PIXELS)
    total = (len(split.train) + len(split.val)) * (2 if opts.png_folders else 1)
    progress = BuildProgress(snapshot.pk, total, attempt=attempt)
    load = progress.counting(frames.load_frame)
    metadata = _payload_metadata(snapshot, plan, episodes, binary)
    write_payload(folder / "train.pt", split.train, load, metadata)
    write_payload(folder / "val.pt", split.val, load, metadata)
    splits_by_key = _write_indexes(folder, manifest, split)
    if opts.png_folders:
        _write_png_folders(folder, split.train + split.val, splits_by_key, frames, progress)
    stats = _split_stats(episodes, plan, opts)
    if opts.trend:
        load_name = progress.counting(frames.load, count=False)
        beat = progress.counting(lambda name: None, count=False)
        stats["trend"] = _write_trend(
            snapshot, folder / "trend", opts, load_name, lambda names: _undecodable(names, skipped, beat)
        )
    stats["skipped_frames"] = _skipped_stats(skipped)
    _write_summary(folder, snapshot, opts, stats)
    return stats


def _readable_frames(
    snapshot: DatasetSnapshot, opts: SnapshotOptions, skipped: dict[str, str], attempt: int
) -> tuple[list[list[FrameRef]], list[dict]]:
    """The project's labeled frames of the options' sources and camera (by episode) and their manifest rows,
    less the frames that cannot be read or decoded (their reasons added to `skipped`); SnapshotError when
    none is left. The check keeps the build's heartbeat (the frame count comes later)."""
    project = snapshot.project
    episodes, manifest = selectors.labeled_frames(project=project, sources=opts.sources, camera=opts.camera)
    checking = BuildProgress(snapshot.pk, 0, attempt=attempt)
    names = [ref.image for ep in episodes for ref in ep]
    broken = _undecodable(names, skipped, checking.counting(lambda name: None, count=False))
    if broken:
        by_frame = {(ref.episode, ref.step): ref.image for ep in episodes for ref in ep}
        episodes = [kept for ep in episodes if (kept := [ref for ref in ep if ref.image not in broken])]
        manifest = [row for row in manifest if by_frame[(row["episode"], row["step"])] not in broken]
    if not episodes:
        raise SnapshotError(f"no labeled frames from sources {opts.sources} with camera {opts.camera!r}")
    return episodes, manifest


def _split_plan(
    project: Project, episodes: list[list[FrameRef]], binary: BinaryOptions, opts: SnapshotOptions
) -> SplitPlan:
    """The train/val split (episodes pinned to a split stay in it); SnapshotError, saying what to do, when a
    split lacks success or fail frames."""
    plan = plan_split(episodes, binary, mode=opts.split, pinned=selectors.pinned_episode_splits(project=project))
    split = plan.split
    problems = missing_classes(split)
    if problems:
        counts = "; ".join(
            f"{name} {c['success']} success / {c['fail']} fail"
            for name, c in ((name, _counts(getattr(split, name))) for name in ("train", "val"))
        )
        raise SnapshotError(
            f"Cannot build a usable snapshot: {'; '.join(problems)}.\n"
            f"Frames: {counts} (split by {plan.mode}{': ' + plan.reason if plan.reason else ''}).\n"
            f"What to do: label both success and fail frames (at least one of each per split), or change "
            f"split (now {opts.split}), val_split (now {opts.val_split}) or seed (now {opts.seed})."
        )
    return plan


def _payload_metadata(
    snapshot: DatasetSnapshot, plan: SplitPlan, episodes: list[list[FrameRef]], binary: BinaryOptions
) -> dict:
    """The payloads' metadata: RLinf's real-world layout for a split by frame, else the plain one."""
    split = plan.split
    raw_path = f"reward-studio://{snapshot.project.name}/snapshot_{snapshot.number}"
    if plan.mode == "frame":
        all_frames = [f for ep in episodes for f in ep]
        return realworld_metadata(all_frames, binary, num_train=len(split.train), num_val=len(split.val))
    return payload_metadata(binary, raw_data_path=raw_path, num_train=len(split.train), num_val=len(split.val))


def _write_indexes(folder: Path, manifest: list[dict], split: BinarySplit) -> dict[tuple[str, int], str]:
    """labels.jsonl (every manifest row with its split), val_index.json and train_index.json; each frame's split."""
    splits_by_key = {(r.episode, r.step): name for name in ("train", "val") for r in getattr(split, name)}
    with (folder / "labels.jsonl").open("w") as out:
        for row in manifest:
            out.write(json.dumps({**row, "split": splits_by_key.get((row["episode"], row["step"]), "")}) + "\n")
    with (folder / "val_index.json").open("w") as out:
        json.dump([{"episode": r.episode, "step": r.step, "label": r.label} for r in split.val], out)
    with (folder / "train_index.json").open("w") as out:  # each train.pt frame's episode (OOD calibration)
        json.dump([{"episode": r.episode, "step": r.step, "label": r.label} for r in split.train], out)
    return splits_by_key


def _split_stats(episodes: list[list[FrameRef]], plan: SplitPlan, opts: SnapshotOptions) -> dict:
    split = plan.split
    shared = shared_episodes(split.train_episodes, split.val_episodes)
    return {
        "episodes": len(episodes),
        "labeled_frames": sum(len(ep) for ep in episodes),
        "train": _counts(split.train),
        "val": _counts(split.val),
        "raw": split.raw_counts,
        "train_episodes": split.train_episodes,
        "val_episodes": split.val_episodes,
        "split": plan.mode,
        "split_reason": plan.reason,
        "shared_episodes": len(shared),
        "split_warning": leak_warning(len(shared), len(split.val_episodes)),
        "sources": sorted({r.source for ep in episodes for r in ep}),
        "camera": opts.camera,
    }


def _write_summary(folder: Path, snapshot: DatasetSnapshot, opts: SnapshotOptions, stats: dict) -> None:
    """snapshot.json: the project, number, options and stats, who made it and when."""
    (folder / "snapshot.json").write_text(
        json.dumps(
            {
                "project": snapshot.project.name,
                "number": snapshot.number,
                "options": opts.to_dict(),
                "stats": stats,
                "created_by": snapshot.created_by.get_username() if snapshot.created_by else "",
                "created_at": snapshot.created_at.isoformat(),
            },
            indent=2,
        )
    )


def _counts(frames: list[FrameRef]) -> dict[str, int]:
    success = sum(1 for f in frames if f.label == 1)
    return {"total": len(frames), "success": success, "fail": len(frames) - success}


def _write_png_folders(
    folder: Path, refs: list[FrameRef], splits: dict, frames: _FrameCache, progress: BuildProgress
) -> None:
    for sub in ("success", "failure"):
        (folder / sub).mkdir()
    tick = progress.counting(lambda ref: None)
    for ref in refs:
        tick(ref)
        target = (
            folder
            / ("success" if ref.label == 1 else "failure")
            / f"{splits[(ref.episode, ref.step)]}_{ref.episode}_{ref.step:06d}.png"
        )
        if ref.image.endswith(".png"):
            with default_storage.open(ref.image, "rb") as fh:
                target.write_bytes(fh.read())
        else:
            array = frames.load(ref.image)
            target.write_bytes(encode_array(array, max_side=1 << 15, max_pixels=1 << 30).data)


def _write_trend(
    snapshot: DatasetSnapshot,
    folder: Path,
    opts: SnapshotOptions,
    load: Callable[[str], Any],
    undecodable: Callable[[list[str]], set[str]],
) -> dict:
    from training.vlm.prompt import prompt_render

    project = snapshot.project
    cameras = list(project.camera_views or [])
    if len(cameras) < 2:
        return {"skipped": "the project has fewer than two cameras"}
    views = (cameras[0], cameras[1])
    windows, score_name = selectors.labeled_windows(project=project, sources=opts.sources, views=views)
    broken = undecodable([name for w in windows for name in (*w.main_images, *w.extra_images)])
    windows = [w for w in windows if broken.isdisjoint(w.main_images) and broken.isdisjoint(w.extra_images)]
    trend_opts = TrendOptions(
        window_size=project.window_size,
        stride=project.trend_stride,
        delta_threshold=project.trend_delta_threshold,
        tail_unclear_ratio=project.trend_tail_unclear_ratio,
        val_split=opts.trend_val_split,
        balance=opts.trend_balance,
        reverse_positive_augmentation=opts.trend_reverse_augmentation,
        seed=opts.seed,
        score_name=score_name,
        views=views,
    )
    split = split_windows(windows, trend_opts)
    prompt = prompt_render(project.prompt_template, task=project.task_description, window_size=project.window_size)
    info = write_trend_dataset(
        folder,
        split,
        load=load,
        prompt=prompt,
        task=project.task_description,
        options=trend_opts,
        extra_info={
            "raw_data_path": f"reward-studio://{project.name}/snapshot_{snapshot.number}",
            "project": project.name,
            "snapshot": snapshot.number,
            "sources": opts.sources,
        },
    )
    kept = ("num_train_samples", "num_eval_samples", "train_label_counts", "eval_label_counts")
    return {**{k: info[k] for k in kept}, "warning": eval_warning(split, trend_opts)}


def _archive_name(snapshot: DatasetSnapshot) -> str:
    return f"{snapshot.project.name.replace('/', '_')}_snapshot_{snapshot.number}.zip"


def snapshot_archive(*, snapshot: DatasetSnapshot) -> Path:
    """A zip of the snapshot folder (built once; the snapshot never changes)."""
    if snapshot.status != DatasetSnapshot.Status.READY:
        raise SnapshotError(f"snapshot #{snapshot.number} is {snapshot.status}")
    folder = local_path(snapshot.folder)
    archive = folder.parent / _archive_name(snapshot)
    if archive.exists():
        return archive
    tmp = archive.with_suffix(".zip.tmp")
    root = archive.stem
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, f"{root}/{path.relative_to(folder)}")
    tmp.replace(archive)
    return archive


def snapshot_archive_stream(*, snapshot: DatasetSnapshot) -> tuple[str, Iterator[bytes]]:
    """The archive's file name and its bytes as they are zipped, block by block (about 1 MiB each): a
    download starts at once, costs no disk and holds one block in memory, whatever the snapshot's size.
    Same content as `snapshot_archive`; raises SnapshotError now when the snapshot is not ready."""
    if snapshot.status != DatasetSnapshot.Status.READY:
        raise SnapshotError(f"snapshot #{snapshot.number} is {snapshot.status}")
    name = _archive_name(snapshot)
    return name, zip_folder_blocks(local_path(snapshot.folder), name.removesuffix(".zip"))


def snapshot_delete(*, snapshot: DatasetSnapshot) -> None:
    if snapshot.jobs.exists():
        raise SnapshotError(f"snapshot #{snapshot.number} trained jobs; delete those jobs first")
    folder = work_folder(snapshot.folder)
    DatasetSnapshot.objects.filter(pk=snapshot.pk).delete()
    stored_folder_delete(snapshot.folder)
    for archive in folder.parent.glob(f"*_snapshot_{snapshot.number}.zip"):
        archive.unlink(missing_ok=True)
