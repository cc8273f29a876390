"""Imports as background jobs: the upload is stored, a Celery task (queue `ingest`) imports it.

The web process only writes the uploaded files to `IMPORT_DIR` and answers at once; unpickling,
decoding and storing run in a worker under a time limit (Celery soft/hard limits) and a memory
limit (`IMPORT_MAX_MEMORY_BYTES` of address space on top of what the worker already holds), and the
job row records progress and the summary for the page to show.
"""

from __future__ import annotations

import contextlib
import resource
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.jobs.models import JobStatus
from common.jobs.services import JobHeartbeat, JobKind, job_claim, job_finish, job_progress
from projects.models import Project

from ..models import ImportJob
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
        project=project,
        created_by=user if getattr(user, "pk", None) else None,
        folder=str(folder),
        env_id=env_id,
        enqueued_at=timezone.now(),
    )
    transaction.on_commit(lambda: _enqueue(job.pk))
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
    """Import a queued job's files; the job ends succeeded (with its summary) or failed (with the reason). A
    job another runner has already claimed (running or ended) is returned as it is: one run per job, since the
    run deletes the job's files."""
    job = ImportJob.objects.select_related("project").filter(pk=job_id).first()
    if job is None:
        return None
    attempt = job_claim(ImportJob, pk=job.pk, done=0, progress=0.0)
    if attempt is None:
        job.refresh_from_db()
        return job
    folder = Path(job.folder)
    # every write of this run is guarded by its attempt: a run the sweep presumed dead cannot end the next one
    counts = {"total": 0, "done": 0}

    def on_sources(count: int) -> None:
        counts["total"] = count
        job_progress(ImportJob, pk=job.pk, attempt=attempt, total=count)

    def on_progress(source: Source) -> None:
        counts["done"] += 1
        fraction = counts["done"] / counts["total"] if counts["total"] else 0.0
        job_progress(ImportJob, pk=job.pk, attempt=attempt, progress=fraction, done=counts["done"])

    status, error, summary = JobStatus.FAILED, "", {}
    try:
        with (
            memory_limit(settings.IMPORT_MAX_MEMORY_BYTES),
            JobHeartbeat(ImportJob, job.pk, attempt=attempt, interval=settings.JOBS_HEARTBEAT_SECONDS),
        ):
            paths = sorted(path for part in sorted(folder.iterdir()) for path in part.iterdir())
            result = import_paths(
                project=job.project, paths=paths, env_id=job.env_id, on_sources=on_sources, on_progress=on_progress
            )
        status, summary = JobStatus.SUCCEEDED, summary_to_json(result)
    except SourceError as exc:
        error = str(exc)
    except MemoryError:
        error = f"the import needed more than {settings.IMPORT_MAX_MEMORY_BYTES} bytes (IMPORT_MAX_MEMORY_BYTES)"
    except Exception as exc:
        if exc.__class__.__name__ != "SoftTimeLimitExceeded":
            raise
        error = f"the import took longer than {settings.IMPORT_TIME_LIMIT_SECONDS} s (IMPORT_TIME_LIMIT_SECONDS)"
    finally:
        if job_finish(ImportJob, pk=job.pk, attempt=attempt, status=status, error=error, summary=summary):
            shutil.rmtree(folder, ignore_errors=True)
    job.refresh_from_db()
    return job


def _enqueue(job_id: int) -> None:
    from ..tasks import run_import_job

    run_import_job.delay(job_id)


def _remove_upload(job_id: int) -> None:
    folder = ImportJob.objects.filter(pk=job_id).values_list("folder", flat=True).first()
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


# The sweep requeues an import whose worker died (the next run imports the stored upload again; episodes
# already in are skipped), or fails it once JOBS_MAX_ATTEMPTS runs were lost, removing its upload. Queued
# imports are left alone: their message may wait behind other imports for any time.
IMPORT_JOBS = JobKind(
    name="imports",
    model=ImportJob,
    enqueue=_enqueue,
    hint="was the ingest worker killed or out of memory? Upload the files again.",
    on_failed=_remove_upload,
)


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
