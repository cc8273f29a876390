"""The LeRobot export as a background job, so the page answers the click at once and shows progress: a
token names the job; its state (status, episodes written of the total, the error) lives in a Redis hash for
EXPORT_JOB_TTL_S; a Celery task (queue `ingest`) writes the zip to the file storage, where the download view
reads it. The synchronous GET (labeling/imports/lerobot/views.py) stays for scripts."""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from common.redis_clients import redis_from_url
from projects.models import Project

from .export import ExportError, lerobot_export_zip

EXPORT_JOB_TTL_S = 3600  # a finished export can be downloaded for an hour
EXPORT_FOLDER = "exports/lerobot"
PREFIX = "rs:lerobot-export:"
log = logging.getLogger(__name__)
QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"


def _redis():
    return redis_from_url(settings.REDIS_URL)


def _key(token: str) -> str:
    return PREFIX + token


def _set(token: str, **fields) -> None:
    redis = _redis()
    redis.hset(_key(token), mapping={k: str(v) for k, v in fields.items()})
    redis.expire(_key(token), EXPORT_JOB_TTL_S)


def export_file_name(token: str) -> str:
    return f"{EXPORT_FOLDER}/{token}.zip"


def exports_expired_remove(*, older_than_s: float = EXPORT_JOB_TTL_S) -> int:
    """Remove export zips older than their job's state (nothing can download them any more); how many went.
    Each export run calls it, so the folder holds at most about an hour of exports."""
    try:
        _folders, names = default_storage.listdir(EXPORT_FOLDER)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    cutoff, removed = timezone.now() - timedelta(seconds=older_than_s), 0
    for name in names:
        path = f"{EXPORT_FOLDER}/{name}"
        try:
            if name.endswith(".zip") and default_storage.get_modified_time(path) < cutoff:
                default_storage.delete(path)
                removed += 1
        except OSError:  # removed meanwhile by another run
            log.debug("export %s already gone", path)
    return removed


def export_job_start(*, project: Project, fps: int) -> str:
    """Record a queued export of `project` and send it to the worker once the transaction commits."""
    from ...tasks import run_lerobot_export

    token = secrets.token_urlsafe(16)
    total = project.episodes.filter(status="finished").count()
    _set(token, project=project.pk, fps=fps, status=QUEUED, done=0, total=total, error="")
    transaction.on_commit(lambda: run_lerobot_export.delay(token))
    return token


def export_job_state(*, token: str, project: Project) -> dict | None:
    """The job's state, None for an unknown (or expired) token or one of another project."""
    raw = {k.decode(): v.decode() for k, v in _redis().hgetall(_key(token)).items()}
    if not raw or raw.get("project") != str(project.pk):
        return None
    done, total = int(raw["done"]), int(raw["total"])
    return {
        "status": raw["status"],
        "done": done,
        "total": total,
        "percent": round(100 * done / total) if total else 0,
        "error": raw.get("error", ""),
    }


def export_job_run(token: str) -> str:
    """Write the export of a queued job (idempotent: a job not queued is left as it is)."""
    raw = {k.decode(): v.decode() for k, v in _redis().hgetall(_key(token)).items()}
    if raw.get("status") != QUEUED:
        return raw.get("status", "missing")
    project = Project.objects.filter(pk=int(raw["project"])).first()
    if project is None:
        _set(token, status=FAILED, error="the project was deleted")
        return FAILED
    _set(token, status=RUNNING)
    exports_expired_remove()

    def on_episode(done: int, total: int) -> None:
        _set(token, done=done, total=total)

    handle: IO[bytes] | None = None
    try:
        handle = lerobot_export_zip(
            project=project, max_frames=settings.LEROBOT_EXPORT_MAX_FRAMES, fps=int(raw["fps"]), on_episode=on_episode
        )
        name = export_file_name(token)
        if default_storage.exists(name):
            default_storage.delete(name)
        default_storage.save(name, File(handle, name=f"{token}.zip"))
    except ExportError as exc:
        _set(token, status=FAILED, error=str(exc))
        return FAILED
    finally:
        if handle is not None:
            handle.close()
    _set(token, status=SUCCEEDED)
    return SUCCEEDED


def export_job_file(*, token: str, project: Project) -> IO[bytes] | None:
    """The finished export's zip, open; None when the job is unknown, not finished or its file is gone."""
    state = export_job_state(token=token, project=project)
    if state is None or state["status"] != SUCCEEDED or not default_storage.exists(export_file_name(token)):
        return None
    return default_storage.open(export_file_name(token), "rb")


__all__ = ["export_job_file", "export_job_run", "export_job_start", "export_job_state"]
