"""The few calls the cache and publishing need from a Django storage, streamed (never a whole file in memory).

An S3 storage goes through boto3's client (thread-safe, one per storage and process, `_client`: django-storages
keeps one per thread, and under ASGI every request runs on a new thread, which made a client, 125 ms of CPU idle
and 0.5 s under load, per request; its connections kept alive in a pool of `config.CONNECTIONS`): a folder's files move together through one managed transfer
(`TRANSFER_THREADS` concurrent GETs or PUTs, ranged parts for large files, streamed to and from the files), and
many small objects (an ingest chunk's frames) are one `PutObject` each, `TRANSFER_THREADS` at a time. Any other
storage goes through its own `open`/`save`, one file after another."""

from __future__ import annotations

import mimetypes
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import Storage
from django.utils.functional import LazyObject, empty

from .config import TRANSFER_THREADS

CHUNK = 1024 * 1024
PART_BYTES = 8 * 1024 * 1024  # ranged GETs and multipart PUTs of larger files, this size each (boto3's own)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_clients: dict[int, tuple[Storage, Any]] = {}  # id(storage) -> (storage, its client), for the process
_clients_lock = threading.Lock()


def _s3_key(storage: Storage, name: str) -> str | None:
    """The object key behind `name` on an S3 storage; None for any other storage."""
    if not hasattr(storage, "bucket") or not hasattr(storage, "_normalize_name"):
        return None
    from storages.utils import clean_name

    return str(storage._normalize_name(clean_name(name)))


def _bucket(storage: Storage) -> Any:
    return storage.bucket  # type: ignore[attr-defined]  # S3Storage's boto3 Bucket


def _unwrapped(storage: Storage) -> Storage:
    """The storage itself behind `default_storage` (a lazy proxy, replaced when the settings change)."""
    if isinstance(storage, LazyObject):
        if storage._wrapped is empty:
            storage._setup()
        return storage._wrapped
    return storage


def _client(storage: Storage) -> Any:
    """The process's boto3 client for an S3 storage (made on first use, shared by every thread: a botocore
    client is thread-safe), kept while that storage object is the one in use."""
    real = _unwrapped(storage)
    with _clients_lock:
        found = _clients.get(id(real))
        if found is None or found[0] is not real:
            client = real.connection.meta.client  # type: ignore[attr-defined]  # S3Storage's boto3 resource
            found = _clients[id(real)] = (real, client)
        return found[1]


def _requests_pool() -> ThreadPoolExecutor:
    """The process's threads for concurrent small requests (made once: a thread per call costs more than a PUT)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="store")
        return _pool


def _transfer(storage: Storage) -> Any:
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    config = TransferConfig(
        max_concurrency=TRANSFER_THREADS,
        multipart_threshold=PART_BYTES,
        multipart_chunksize=PART_BYTES,
    )
    return create_transfer_manager(_client(storage), config)


def downloads(storage: Storage, pairs: Sequence[tuple[str, Path]]) -> None:
    """Write each stored name to its path (folders made), concurrently on S3."""
    for _, path in pairs:
        path.parent.mkdir(parents=True, exist_ok=True)
    if not _transferred(storage, pairs, send=False):
        for name, path in pairs:
            download(storage, name, path)


def uploads(storage: Storage, pairs: Sequence[tuple[Path, str]]) -> None:
    """Store each local path under exactly its name, concurrently on S3."""
    if not _transferred(storage, [(name, path) for path, name in pairs], send=True):
        for path, name in pairs:
            upload(storage, path, name)


def _transferred(storage: Storage, items: Sequence[tuple[str, Path]], *, send: bool) -> bool:
    """Move each (stored name, local path) in one managed transfer; False (nothing done) off S3."""
    if not items or _s3_key(storage, items[0][0]) is None:
        return False
    bucket = storage.bucket_name  # type: ignore[attr-defined]
    with _transfer(storage) as manager:
        futures = []
        for name, path in items:
            key = _s3_key(storage, name)
            futures.append(manager.upload(str(path), bucket, key) if send else manager.download(bucket, key, str(path)))
        for future in futures:
            future.result()
    return True


def objects_put(storage: Storage, files: Sequence[tuple[str, bytes]]) -> None:
    """Store small files (name, bytes) on an S3 storage: one PutObject each, `TRANSFER_THREADS` at a time,
    with the content type of the name. Raises the first failure once every request has ended."""
    client, bucket = _client(storage), storage.bucket_name  # type: ignore[attr-defined]

    def put(item: tuple[str, bytes]) -> None:
        name, data = item
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        client.put_object(Bucket=bucket, Key=_s3_key(storage, name), Body=data, ContentType=kind)

    if len(files) == 1:
        put(files[0])
        return
    futures = [_requests_pool().submit(put, item) for item in files]
    errors = [error for future in futures if (error := future.exception()) is not None]
    if errors:
        raise errors[0]


def objects_read(storage: Storage, names: Sequence[str]) -> list[bytes]:
    """The content of each small stored file, in order (FileNotFoundError for a missing one): on an S3 storage
    one GET each (`open` would ask HEAD first), one after another on the caller's thread. A labeling page's frame
    bundles read so: GETs 8 at a time brought all of an episode's frames 1.3x sooner (29 s against 39 s) with
    the page's first frame no sooner, on the 2-core machine (bench/results/labeling_object_store_2026-12-07.txt)."""
    if not is_s3(storage):
        return [_read(storage, name) for name in names]
    from botocore.exceptions import ClientError

    client, bucket = _client(storage), storage.bucket_name  # type: ignore[attr-defined]
    out = []
    for name in names:
        try:
            out.append(bytes(client.get_object(Bucket=bucket, Key=_s3_key(storage, name))["Body"].read()))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise FileNotFoundError(name) from exc
            raise
    return out


def _read(storage: Storage, name: str) -> bytes:
    with storage.open(name, "rb") as handle:
        return bytes(handle.read())


def is_s3(storage: Storage) -> bool:
    return _s3_key(storage, "x") is not None


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
    """A small stored file's content; None when there is none (on S3 one GET, found or not: a folder's
    manifest looked up costs one request, not HEAD + HEAD + GET)."""
    if is_s3(storage):
        found = object_read(storage, name, small_bytes=1 << 62)
        return None if found is None else bytes(found[1])
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
        answer = _client(storage).get_object(Bucket=storage.bucket_name, Key=key)  # type: ignore[attr-defined]
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
