"""Imports as background jobs: the upload is stored, a Celery task (queue `ingest`) imports it.

The web process only writes the uploaded files to `IMPORT_DIR` and answers at once; unpickling,
decoding and storing run in a worker under a time limit (Celery soft/hard limits) and a memory
limit (`IMPORT_MAX_MEMORY_BYTES` of address space on top of what the worker already holds), and the
job row records progress and the summary for the page to show.
"""

from __future__ import annotations

import contextlib
import functools
import resource
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..job_liveness import Heartbeat, Sweep, stale_sweep
from ..models import ImportJob, Project
from .services import import_paths
from .sources import ImportSummary, Source, SourceError, safe_file_name


def import_job_create(*, project: Project, files: Iterable, env_id: str = "", user=None) -> ImportJob:
    """Store the uploads under their own (sanitised) names and queue their import."""
    folder = Path(settings.IMPORT_DIR) / uuid.uuid4().hex
    for number, upload in enumerate(files):
        target = folder / str(number) / safe_file_name(upload.name)
        target.parent.mkdir(parents=True)
        with open(target, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
    job = ImportJob.objects.create(
        project=project, created_by=user if getattr(user, "pk", None) else None, folder=str(folder), env_id=env_id
    )
    from ..tasks import run_import_job

    transaction.on_commit(lambda: run_import_job.delay(job.pk))
    return job


def summary_to_json(summary: ImportSummary) -> dict:
    return asdict(summary)


def summary_from_json(data: dict) -> ImportSummary:
    fields: dict[str, Any] = {key: data.get(key, 0) for key in ("episodes", "steps", "frames", "labels")}
    lists: dict[str, Any] = {
        key: [tuple(item) for item in data.get(key, [])] for key in ("already_imported", "failed", "ignored")
    }
    return ImportSummary(**fields, **lists)


def import_job_run(job_id: int) -> ImportJob | None:
    """Import a queued job's files; the job ends done (with its summary) or failed (with the reason). A job
    another runner has already claimed (running or ended) is returned as it is: one run per job, since the
    run deletes the job's files."""
    job = ImportJob.objects.select_related("project").filter(pk=job_id).first()
    if job is None:
        return None
    claimed = ImportJob.objects.filter(pk=job.pk, status=ImportJob.Status.QUEUED).update(
        status=ImportJob.Status.RUNNING, done=0, updated_at=timezone.now(), attempt=F("attempt") + 1
    )
    if not claimed:
        job.refresh_from_db()
        return job
    job.refresh_from_db(fields=["attempt"])
    folder = Path(job.folder)
    # every write of this run is guarded by its attempt: a run the sweep presumed dead cannot end the next one
    mine = ImportJob.objects.filter(pk=job.pk, status=ImportJob.Status.RUNNING, attempt=job.attempt)

    def on_sources(count: int) -> None:
        mine.update(total=count, updated_at=timezone.now())

    def on_progress(source: Source) -> None:
        mine.update(done=F("done") + 1, updated_at=timezone.now())

    status, error, summary = ImportJob.Status.FAILED, "", {}
    try:
        with (
            memory_limit(settings.IMPORT_MAX_MEMORY_BYTES),
            Heartbeat(
                ImportJob,
                job.pk,
                status=ImportJob.Status.RUNNING,
                attempt=job.attempt,
                field="updated_at",
                interval=settings.JOBS_HEARTBEAT_SECONDS,
            ),
        ):
            paths = sorted(path for part in sorted(folder.iterdir()) for path in part.iterdir())
            result = import_paths(
                project=job.project, paths=paths, env_id=job.env_id, on_sources=on_sources, on_progress=on_progress
            )
        status, summary = ImportJob.Status.DONE, summary_to_json(result)
    except SourceError as exc:
        error = str(exc)
    except MemoryError:
        error = f"the import needed more than {settings.IMPORT_MAX_MEMORY_BYTES} bytes (IMPORT_MAX_MEMORY_BYTES)"
    except Exception as exc:
        if exc.__class__.__name__ != "SoftTimeLimitExceeded":
            raise
        error = f"the import took longer than {settings.IMPORT_TIME_LIMIT_SECONDS} s (IMPORT_TIME_LIMIT_SECONDS)"
    finally:
        now = timezone.now()
        if mine.update(status=status, error=error, summary=summary, finished_at=now, updated_at=now):
            shutil.rmtree(folder, ignore_errors=True)
    job.refresh_from_db()
    return job


def import_jobs_recover_stale(*, now=None) -> Sweep:
    """Requeue running imports whose heartbeat is older than JOBS_STALE_AFTER_SECONDS (their worker died; the
    next run imports the stored upload again, episodes already in are skipped), or fail them with the
    reason once JOBS_MAX_ATTEMPTS runs were lost (their uploads are removed then). Queued imports are left
    alone: their message may wait behind other imports for any time."""
    from ..tasks import run_import_job

    now = now or timezone.now()
    silent = settings.JOBS_STALE_AFTER_SECONDS
    stale = ImportJob.objects.filter(status=ImportJob.Status.RUNNING, updated_at__lt=now - timedelta(seconds=silent))

    def requeue(rows, job_id: int, attempt: int) -> bool:
        with transaction.atomic():
            moved = bool(rows.update(status=ImportJob.Status.QUEUED, updated_at=now))
            if moved:
                transaction.on_commit(functools.partial(run_import_job.delay, job_id))
        return moved

    def fail(rows, job_id: int, attempt: int) -> bool:
        folder = rows.values_list("folder", flat=True).first()
        reason = (
            f"its worker stopped (no heartbeat for over {silent} s) in each of {attempt} runs (JOBS_MAX_ATTEMPTS); "
            "was the ingest worker killed or out of memory? Upload the files again."
        )
        if not rows.update(status=ImportJob.Status.FAILED, error=reason, finished_at=now, updated_at=now):
            return False
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        return True

    return stale_sweep(stale, max_attempts=settings.JOBS_MAX_ATTEMPTS, requeue=requeue, fail=fail)


@contextlib.contextmanager
def memory_limit(extra_bytes: int) -> Iterator[None]:
    """Cap this process's address space at its current size plus `extra_bytes`, restoring it afterwards.

    An allocation past the cap raises MemoryError in this task instead of taking the machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    current = _address_space()
    cap = current + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0
