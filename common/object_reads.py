"""Reads of stored objects for the web's answers (the media view, the labeling page's frame bundles).

One S3 client per storage and process (`filestore.store._client`). django-storages keeps one per thread, and under ASGI every request runs
its sync view on a thread of its own, so each media or bundle request built a boto3 session and client first
(125 ms of CPU on an idle machine, 0.5 s under load, against 3 ms for a small GET): the labeling page's frames
were slow on the object store for that, not for the store. A botocore client is thread-safe; its pool keeps 32
connections alive (`filestore.config.CONNECTIONS`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.core.files.storage import Storage

from .filestore import store

KEPT_PREFIX = "web/frame-bundles/"  # the storage cache's entries of `frames_read_kept`


def object_client(storage: Storage) -> Any:
    """The process's boto3 client for an S3 storage (made on first use, shared by every thread)."""
    return store._client(storage)


def object_key(storage: Storage, name: str) -> str:
    key = store._s3_key(storage, name)
    if key is None:
        raise ValueError("not an S3 storage")
    return key


def small_objects_read(storage: Storage, names: Sequence[str]) -> list[bytes]:
    """The content of each small stored file, in order (FileNotFoundError for a missing one). On an S3 storage
    one GET each on the process's client, `TRANSFER_THREADS` at a time for the whole process; any other storage
    reads its files one after another."""
    if not store.is_s3(storage):
        return store.objects_read(storage, names)
    client, bucket = object_client(storage), storage.bucket_name  # type: ignore[attr-defined]

    def read(name: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            return bytes(client.get_object(Bucket=bucket, Key=object_key(storage, name))["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise FileNotFoundError(name) from exc
            raise

    if len(names) <= 1:
        return [read(name) for name in names]
    return list(store._requests_pool().map(read, names))


def object_client_warm_up(storage: Storage) -> None:
    """At a web process's start, in a thread: the S3 client made now (0.35-0.5 s of CPU under load, importing
    boto3 and reading its service model) rather than during a page's first frame. Nothing for other storages."""

    def make() -> None:
        try:
            if store.is_s3(storage):
                object_client(storage)
        except Exception:  # noqa: BLE001 - the first request makes it again and reports what fails
            logging.getLogger("webapp").exception("the object store's client could not be made at start")

    threading.Thread(target=make, name="object-client-warm-up", daemon=True).start()


def frames_read_kept(storage: Storage, names: Sequence[str]) -> list[bytes]:
    """`small_objects_read`, kept on this machine: on an S3 storage the frames of one call (a labeling page's
    bundle) are one entry of the storage cache (`STORAGE_CACHE_DIR`, bounded by `STORAGE_CACHE_MAX_MB`, least
    recently used out first), so a page's reloads and other people opening the episode read them from disk, not
    from the bucket. Frames never change content under their names (a new frame gets a new name), and the entry
    is named by the list of names, so it is never stale. One entry per bundle, not per frame: the cache lists
    its entries on each new one (its eviction pass), cheap for an episode's few dozen bundles, not for its
    thousands of frames."""
    if len(names) < 2 or not store.is_s3(storage):
        return small_objects_read(storage, names)
    from .filestore.services import file_cache

    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:40]

    def load(_: str, target: Path) -> None:
        parts = small_objects_read(storage, names)
        with open(target, "wb") as handle:
            handle.write(json.dumps([len(part) for part in parts]).encode() + b"\n")
            handle.writelines(parts)

    with file_cache().held(f"{KEPT_PREFIX}{digest}", load) as path:
        raw = path.read_bytes()
    head, _, body = raw.partition(b"\n")
    out, offset = [], 0
    for length in json.loads(head):
        out.append(body[offset : offset + length])
        offset += length
    return out
