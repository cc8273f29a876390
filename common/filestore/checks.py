"""Start-up checks (Django's system checks, so `manage.py` commands such as `inference_worker` run them, and
Celery workers at `worker_init`): one line each for what this process lacks to reach its files and data."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from .config import BACKENDS


def storage_problems() -> list[str]:
    """What keeps this process from the stored files, one line each (none: nothing)."""
    backend = settings.STORAGE_BACKEND
    if backend == "local":
        return []
    if backend not in BACKENDS:
        from django.utils.module_loading import import_string

        try:
            import_string(backend)
        except ImportError as exc:
            return [f"STORAGE_BACKEND={backend!r} is neither local, s3 nor an importable storage class ({exc})"]
        return []
    problems = []
    if not settings.S3_BUCKET:
        problems.append("STORAGE_BACKEND=s3 without S3_BUCKET: set the bucket every process shares")
    if not (settings.S3_ACCESS_KEY_ID and settings.S3_SECRET_ACCESS_KEY) and not _boto3_has_credentials():
        problems.append(
            "no storage credentials: set S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY (or give the machine a role)"
        )
    cache = settings.STORAGE_CACHE_DIR
    try:
        cache.mkdir(parents=True, exist_ok=True)
        writable = os.access(cache, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        problems.append(f"STORAGE_CACHE_DIR={cache} is not a writable folder (the local cache of stored files)")
    return problems


def database_problem() -> str | None:
    from django.db import connection
    from django.db.utils import Error as DatabaseError

    try:
        connection.ensure_connection()
    except DatabaseError as exc:
        where = settings.DATABASES["default"].get("HOST") or settings.DATABASES["default"].get("NAME")
        return f"no database at {where} (DATABASE_URL): {str(exc).strip().splitlines()[0]}"
    return None


@register("filestore")
def storage_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    return [Error(line, id=f"filestore.E00{n}") for n, line in enumerate(storage_problems(), 1)]


@register("database")
def database_check(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Error]:
    if not databases:  # as Django's own database checks: only when a command asks for them
        return []
    problem = database_problem()
    return [Error(problem, id="filestore.E010")] if problem else []


def _boto3_has_credentials() -> bool:
    """Whether boto3 finds credentials of its own (environment, config file, instance role)."""
    import boto3

    return boto3.session.Session().get_credentials() is not None
