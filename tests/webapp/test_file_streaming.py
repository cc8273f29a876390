"""Large stored files go out block by block: under ASGI from an async iterator (Django's FileResponse would
read the whole file into memory first), under WSGI from the file; same bytes either way."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import cast

import pytest
from asgiref.sync import async_to_sync
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.http import StreamingHttpResponse
from django.test import AsyncClient

from common.file_streaming import BLOCK_BYTES
from webapp.views import SMALL_FILE_BYTES

pytestmark = pytest.mark.django_db


@pytest.fixture
def big_file(project):
    data = os.urandom(SMALL_FILE_BYTES + 3 * BLOCK_BYTES + 123)
    name = default_storage.save(f"frames/{project.pk}/big-test.bin", ContentFile(data))
    yield name, data
    default_storage.delete(name)


def test_a_large_file_is_streamed_in_blocks_under_asgi(user, big_file):
    name, data = big_file
    client = AsyncClient()

    async def fetch():
        await client.aforce_login(user)
        response = cast(StreamingHttpResponse, await client.get(f"/media/{name}"))
        assert response.status_code == 200 and response.is_async
        return [block async for block in cast(AsyncIterator[bytes], response.streaming_content)]

    blocks = async_to_sync(fetch)()
    assert len(blocks) == -(-len(data) // BLOCK_BYTES) and max(len(b) for b in blocks) == BLOCK_BYTES
    assert b"".join(blocks) == data


def test_a_large_file_is_streamed_under_wsgi(user_client, big_file):
    name, data = big_file
    response = user_client.get(f"/media/{name}")
    assert response.status_code == 200 and response.streaming and not response.is_async
    assert b"".join(response.streaming_content) == data
