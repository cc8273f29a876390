"""The media view answers HTTP Range requests (browsers ask so for video and large files): 206 with the bytes
asked for, 416 past the end, the whole file for what it ignores. Local files here; the same cases on the object
store in tests/webapp/filestore/test_media_ranges_object_store.py."""

from __future__ import annotations

import os

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from common.file_streaming import BLOCK_BYTES
from webapp.views import SMALL_FILE_BYTES

pytestmark = pytest.mark.django_db

SIZE = 1000

# (Range header, status, the slice of the file answered, Content-Range)
CASES = [
    (None, 200, slice(None), None),
    ("bytes=0-9", 206, slice(0, 10), "bytes 0-9/1000"),
    ("bytes=990-", 206, slice(990, None), "bytes 990-999/1000"),
    ("bytes=-5", 206, slice(995, None), "bytes 995-999/1000"),
    ("bytes=995-5000", 206, slice(995, None), "bytes 995-999/1000"),  # clipped to the file
    ("bytes=-5000", 206, slice(None), "bytes 0-999/1000"),
    ("bytes=999-999", 206, slice(999, None), "bytes 999-999/1000"),
    ("bytes=1000-", 416, None, "bytes */1000"),
    ("bytes=1000-1200", 416, None, "bytes */1000"),
    ("bytes=-0", 416, None, "bytes */1000"),
    ("bytes=5-2", 200, slice(None), None),  # malformed: ignored
    ("bytes=0-1,5-6", 200, slice(None), None),  # several ranges: the whole file
    ("items=0-5", 200, slice(None), None),  # another unit
]


def range_answers_match(client, url: str, data: bytes) -> None:
    """Every case of CASES, asked of `url` (a stored file holding `data`, SIZE bytes)."""
    assert len(data) == SIZE
    for header, status, part, content_range in CASES:
        response = client.get(url, **({"HTTP_RANGE": header} if header else {}))
        assert response.status_code == status, header
        assert response.get("Content-Range") == content_range, header
        if part is not None:
            assert response.content == data[part], header
            assert response["Content-Length"] == str(len(data[part])), header
            assert response["Accept-Ranges"] == "bytes" and "immutable" in response["Cache-Control"], header


def if_range_is_honoured(client, url: str, data: bytes) -> None:
    """A Range with an If-Range naming the file's version is answered; naming another version, the whole file."""
    whole = client.get(url)
    validators = [whole["Last-Modified"]] + ([whole["ETag"]] if whole.has_header("ETag") else [])
    for validator in validators:
        response = client.get(url, HTTP_RANGE="bytes=10-19", HTTP_IF_RANGE=validator)
        assert response.status_code == 206 and response.content == data[10:20], validator
    for other in ('"not-this-version"', "Tue, 01 Jan 2019 00:00:00 GMT", 'W/"weak"'):
        response = client.get(url, HTTP_RANGE="bytes=10-19", HTTP_IF_RANGE=other)
        assert response.status_code == 200 and response.content == data, other
    response = client.get(url, HTTP_RANGE="bytes=5000-", HTTP_IF_RANGE='"not-this-version"')
    assert response.status_code == 200 and response.content == data  # another version: no 416 either


def large_range_streams(client, url: str, data: bytes) -> None:
    """A range past the one-piece size streams in blocks; its bytes and headers are exact."""
    first, last = 7, SMALL_FILE_BYTES + BLOCK_BYTES + 11
    response = client.get(url, HTTP_RANGE=f"bytes={first}-{last}")
    assert response.status_code == 206 and response.streaming
    assert response["Content-Range"] == f"bytes {first}-{last}/{len(data)}"
    assert response["Content-Length"] == str(last - first + 1)
    assert b"".join(response.streaming_content) == data[first : last + 1]


@pytest.fixture
def stored(project):
    made = []

    def store(name: str, data: bytes) -> str:
        stored_name = default_storage.save(f"frames/{project.pk}/ranges/{name}", ContentFile(data))
        made.append(stored_name)
        return f"/media/{stored_name}"

    yield store
    for name in made:
        default_storage.delete(name)


def test_a_local_file_answers_byte_ranges(user_client, stored):
    data = os.urandom(SIZE)
    url = stored("clip.mp4", data)
    range_answers_match(user_client, url, data)
    if_range_is_honoured(user_client, url, data)


def test_a_large_local_file_streams_the_range_asked_for(user_client, stored):
    data = os.urandom(SMALL_FILE_BYTES + 3 * BLOCK_BYTES)
    large_range_streams(user_client, stored("big.bin", data), data)


def test_ranges_keep_the_access_checks(client, member_client, stored, project, django_user_model):
    url = stored("clip.mp4", os.urandom(SIZE))
    assert client.get(url, HTTP_RANGE="bytes=0-9").status_code == 302  # not logged in
    outsider = django_user_model.objects.create_user("mallory", password="pw-mallory-123")
    client.force_login(outsider)
    assert client.get(url, HTTP_RANGE="bytes=0-9").status_code == 404  # not a member
    assert member_client(project, "annotator").get(url, HTTP_RANGE="bytes=0-9").status_code == 206
