"""The media view's Range answers with the file on the object store (SeaweedFS): the same cases as local files
(tests/webapp/test_media_ranges.py), and only the bytes asked for leave the store."""

from __future__ import annotations

import os

import pytest
from django.core.files.storage import default_storage

from common.file_streaming import BLOCK_BYTES
from common.filestore import store
from tests.webapp.test_media_ranges import (
    SIZE,
    if_range_is_honoured,
    large_range_streams,
    range_answers_match,
)
from webapp.views import SMALL_FILE_BYTES

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent_by_the_store(s3_storage):
    """The body sizes of the object GETs made while the test runs."""
    sizes: list[int] = []

    def record(parsed, **_):
        if "ContentLength" in parsed:  # not an error answer
            sizes.append(int(parsed["ContentLength"]))

    events = store._client(default_storage).meta.events
    events.register("after-call.s3.GetObject", record)
    yield sizes
    events.unregister("after-call.s3.GetObject", record)


def test_an_object_answers_byte_ranges_and_the_store_sends_only_them(user_client, project, sent_by_the_store):
    data = os.urandom(SIZE)
    name = f"frames/{project.pk}/ranges/clip.mp4"
    store.objects_put(default_storage, [(name, data)])
    range_answers_match(user_client, f"/media/{name}", data)
    if_range_is_honoured(user_client, f"/media/{name}", data)

    sent_by_the_store.clear()
    response = user_client.get(f"/media/{name}", HTTP_RANGE="bytes=100-149")
    assert response.status_code == 206 and response.content == data[100:150]
    assert sent_by_the_store == [50]  # one GET, of the range only


def test_a_large_object_streams_the_range_asked_for(user_client, project, sent_by_the_store):
    data = os.urandom(SMALL_FILE_BYTES + 3 * BLOCK_BYTES)
    name = f"frames/{project.pk}/ranges/big.bin"
    store.objects_put(default_storage, [(name, data)])
    large_range_streams(user_client, f"/media/{name}", data)
    assert sent_by_the_store == [SMALL_FILE_BYTES + BLOCK_BYTES + 5]


def test_a_missing_object_is_a_404_with_or_without_a_range(user_client, project, s3_storage):
    name = f"/media/frames/{project.pk}/ranges/gone.mp4"
    assert user_client.get(name).status_code == 404
    assert user_client.get(name, HTTP_RANGE="bytes=0-9").status_code == 404
    assert user_client.get(name, HTTP_RANGE="bytes=5000-").status_code == 404
