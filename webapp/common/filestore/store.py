"""The few calls the cache and publishing need from a Django storage, streamed (never a whole file in memory).

An S3 storage goes through boto3's managed transfers (multipart, to and from a path); any other storage
through its own `open`/`save`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import Storage

CHUNK = 1024 * 1024


def _s3_key(storage: Storage, name: str) -> str | None:
    """The object key behind `name` on an S3 storage; None for any other storage."""
    if not hasattr(storage, "bucket") or not hasattr(storage, "_normalize_name"):
        return None
    from storages.utils import clean_name

    return str(storage._normalize_name(clean_name(name)))


def _bucket(storage: Storage) -> Any:
    return storage.bucket  # type: ignore[attr-defined]  # S3Storage's boto3 Bucket


def download(storage: Storage, name: str, path: Path) -> int:
    """Write stored `name` to `path`; its size in bytes."""
    key = _s3_key(storage, name)
    if key is not None:
        _bucket(storage).download_file(key, str(path))
    else:
        with storage.open(name, "rb") as source, open(path, "wb") as target:
            shutil.copyfileobj(source, target, CHUNK)
    return path.stat().st_size


def upload(storage: Storage, path: Path, name: str) -> None:
    """Store the file at `path` under exactly `name` (an existing object of that name is replaced)."""
    key = _s3_key(storage, name)
    if key is not None:
        _bucket(storage).upload_file(str(path), key)
        return
    if storage.exists(name):
        storage.delete(name)
    with open(path, "rb") as handle:
        stored = storage.save(name, File(handle))
    if stored != name:
        raise RuntimeError(f"the storage stored {name} as {stored}")


def read_bytes(storage: Storage, name: str) -> bytes | None:
    """A small stored file's content; None when there is none."""
    if not storage.exists(name):
        return None
    with storage.open(name, "rb") as handle:
        data = handle.read()
    return bytes(data)


def write_bytes(storage: Storage, name: str, data: bytes) -> None:
    key = _s3_key(storage, name)
    if key is not None:
        _bucket(storage).put_object(Key=key, Body=data)
        return
    if storage.exists(name):
        storage.delete(name)
    storage.save(name, ContentFile(data))


def delete_prefix(storage: Storage, prefix: str, *, first: str | None = None) -> None:
    """Remove every stored name starting with `prefix` (`first` before the others)."""
    if first is not None and storage.exists(first):
        storage.delete(first)
    key = _s3_key(storage, prefix)
    if key is not None:
        _bucket(storage).objects.filter(Prefix=key.rstrip("/") + "/").delete()
        return
    folders, files = storage.listdir(prefix)
    for file in files:
        storage.delete(f"{prefix.rstrip('/')}/{file}")
    for folder in folders:
        delete_prefix(storage, f"{prefix.rstrip('/')}/{folder}")


def object_read(storage: Storage, name: str, small_bytes: int) -> tuple[int, bytes | Any] | None:
    """One GET of an S3 object: (size, its bytes when at most `small_bytes`, else its streaming body); None
    when there is no such object. Not for other storages (returns None)."""
    key = _s3_key(storage, name)
    if key is None:
        return None
    from botocore.exceptions import ClientError

    try:
        answer = _bucket(storage).Object(key).get()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise
    size, body = int(answer["ContentLength"]), answer["Body"]
    if size <= small_bytes:
        data = body.read()
        body.close()
        return size, data
    return size, body
