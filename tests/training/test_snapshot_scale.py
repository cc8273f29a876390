"""Snapshots of large projects: the download is zipped as it is sent (the snapshot folder's files, streamed
in blocks under ASGI as under WSGI, no archive written to disk), and a build holds a bounded number of
decoded frames."""

from __future__ import annotations

import io
import zipfile
from collections.abc import AsyncIterator
from typing import cast

import pytest
from asgiref.sync import async_to_sync
from django.http import StreamingHttpResponse
from django.test import AsyncClient

from training.models import DatasetSnapshot
from training.snapshots.services import snapshot_create
from training.storage import local_path

pytestmark = pytest.mark.django_db


def folder_files(snapshot: DatasetSnapshot) -> dict[str, bytes]:
    folder = local_path(snapshot.folder)
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def unzip(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.testzip() is None
        return {name.split("/", 1)[1]: zf.read(name) for name in zf.namelist()}


def test_download_streams_the_snapshot_folder_as_a_zip(user_client, labeled_project):
    snapshot = snapshot_create(project=labeled_project, options={"sources": ["human"]})
    assert snapshot.status == "ready"
    response = user_client.get(f"/snapshots/{snapshot.pk}/download")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == f'attachment; filename="PickCube_snapshot_{snapshot.number}.zip"'
    files = unzip(b"".join(response.streaming_content))
    assert files == folder_files(snapshot) and "train.pt" in files and "labels.jsonl" in files
    assert not list(local_path(snapshot.folder).parent.glob("*.zip"))  # nothing written next to the folder


def test_download_under_asgi_sends_blocks_from_an_async_iterator(user, labeled_project):
    snapshot = snapshot_create(project=labeled_project, options={"sources": ["human"]})
    client = AsyncClient()

    async def download():
        await client.aforce_login(user)
        response = cast(StreamingHttpResponse, await client.get(f"/snapshots/{snapshot.pk}/download"))
        assert response.status_code == 200 and response.is_async
        return [block async for block in cast(AsyncIterator[bytes], response.streaming_content)]

    blocks = async_to_sync(download)()
    assert len(blocks) >= 1
    assert unzip(b"".join(blocks)) == folder_files(snapshot)


def test_a_snapshot_not_ready_is_not_downloaded(user_client, labeled_project):
    snapshot = snapshot_create(project=labeled_project, options={"sources": ["human"]}, build=False)
    response = user_client.get(f"/snapshots/{snapshot.pk}/download")
    assert response.status_code == 404


def test_the_build_keeps_a_bounded_number_of_decoded_frames():
    """A snapshot of a large project must not hold every decoded frame at once: the cache keeps the most
    recently used ones (what neighbouring trend windows share) within a pixel budget and decodes others
    again when asked."""
    import numpy as np
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    from common.images.checks import encode_array
    from training.snapshots.services import _FrameCache

    names = []
    for i in range(3):
        array = np.full((4, 4, 3), 40 * i, dtype=np.uint8)
        data = encode_array(array, max_side=64, max_pixels=4096).data
        names.append(default_storage.save(f"frames/cache-test/{i}.png", ContentFile(data)))
    cache = _FrameCache(budget_pixels=2 * 4 * 4)  # BACKGROUND_DECODE_PIXELS: two of these frames
    first = [cache.load(name) for name in names]
    assert len(cache._cache) == 2 and names[0] not in cache._cache
    assert cache.load(names[1]) is first[1]  # still cached
    again = cache.load(names[0])  # evicted: decoded again, same pixels
    assert again is not first[0] and np.array_equal(again, first[0]) and len(cache._cache) == 2
    assert cache.held == 2 * 4 * 4
    for name in names:
        default_storage.delete(name)
