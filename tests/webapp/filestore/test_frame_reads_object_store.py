"""The labeling page's frames on the object store (SeaweedFS): frame bundles and the media view read on the
process's one S3 client, whatever thread a request runs on (under ASGI each request has a thread of its own, and
a client per thread cost a boto3 session per request), bundles' GETs concurrent and in order."""

from __future__ import annotations

import threading

import pytest
from django.core.files.storage import default_storage
from django.db import connections

from common import object_reads
from common.filestore import services, store
from tests.labeling.factories import episode_with_frames

pytestmark = pytest.mark.django_db


def test_many_small_objects_are_read_in_order_and_a_missing_one_is_named(s3_storage):
    frames = [(f"frames/p/e/{i:03d}.png", f"frame {i}".encode() * (i + 1)) for i in range(40)]
    store.objects_put(default_storage, frames)
    names = [name for name, _ in frames]
    assert object_reads.small_objects_read(default_storage, names) == [data for _, data in frames]
    assert object_reads.small_objects_read(default_storage, names[7:8]) == [frames[7][1]]
    with pytest.raises(FileNotFoundError, match="gone.png"):
        object_reads.small_objects_read(default_storage, [*names[:5], "frames/p/e/gone.png", *names[5:9]])


def _in_threads(count: int, call) -> list:
    """`call()` on `count` new threads, one after another (as ASGI runs each request's view)."""
    results: list = []

    def run() -> None:
        try:
            results.append(call())
        finally:
            connections.close_all()  # this thread's database connection

    for _ in range(count):
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    return results


@pytest.mark.django_db(transaction=True)  # the requests' threads read the episode: committed
def test_requests_on_new_threads_share_one_client(user_client, project, s3_storage, monkeypatch):
    episode = episode_with_frames(project=project, num_steps=12, size=16)
    used = []  # (thread, the client it got)
    real = store._client

    def recording(storage):
        client = real(storage)
        used.append((threading.current_thread().name, id(client)))
        return client

    monkeypatch.setattr(object_reads.store, "_client", recording)
    store._clients.clear()
    frame = episode.steps.get(index=2).frames.get(camera="main").image.name

    def bundle():
        response = user_client.get(f"/api/episodes/{episode.uuid}/frames?camera=main&start=0&end=11")
        assert response.status_code == 200 and response["X-Frame-Steps"] == ",".join(map(str, range(12)))
        return response.content

    def media():
        response = user_client.get(f"/media/{frame}")
        assert response.status_code == 200
        return response.content

    bundles = _in_threads(3, bundle)
    singles = _in_threads(3, media)
    threads, clients = {thread for thread, _ in used}, {client for _, client in used}
    assert len(threads) >= 2 and len(clients) == 1  # one client for the requests of several threads
    names = list(episode.steps.order_by("index").values_list("frames__image", flat=True))
    main = [name for name in names if name.endswith("_main.png")]
    expected = store.objects_read(default_storage, main)
    assert bundles == [b"".join(expected)] * 3
    assert singles == [expected[2]] * 3


def test_a_client_is_made_again_for_another_storage(s3_storage, settings, object_store):
    from tests.object_store import bucket_delete, fresh_bucket, s3_env, s3_storage_config

    first = object_reads.object_client(default_storage)
    assert object_reads.object_client(default_storage) is first
    other = s3_env(object_store, fresh_bucket(object_store))
    settings.STORAGES = {**settings.STORAGES, "default": s3_storage_config(other)}  # a new default_storage
    try:
        assert object_reads.object_client(default_storage) is not first
        store.objects_put(default_storage, [("frames/p/e/x.png", b"other bucket")])
        assert object_reads.small_objects_read(default_storage, ["frames/p/e/x.png"]) == [b"other bucket"]
    finally:
        bucket_delete(object_store, other["S3_BUCKET"])


def test_a_bundle_read_again_comes_from_the_machines_cache_not_the_bucket(s3_storage, settings, tmp_path):
    frames = [(f"frames/p/e/{i:03d}.png", bytes([i]) * (50 + i)) for i in range(30)]
    store.objects_put(default_storage, frames)
    names = [name for name, _ in frames]
    gets: list[str] = []

    def record(params, **_):
        gets.append(params["url_path"])

    events = object_reads.object_client(default_storage).meta.events
    events.register("before-call.s3.GetObject", record)
    try:
        assert object_reads.frames_read_kept(default_storage, names) == [data for _, data in frames]
        assert len(gets) == 30
        assert object_reads.frames_read_kept(default_storage, names) == [data for _, data in frames]
        assert len(gets) == 30  # read again: from the cache
        entries = services.file_cache().entries()
        assert [e.name for e in entries] == [f"{object_reads.KEPT_PREFIX}{entries[0].name.rsplit('/', 1)[1]}"]
        assert entries[0].bytes < 30 * 80 + 200  # the frames and their lengths, once

        assert object_reads.frames_read_kept(default_storage, names[:10]) == [data for _, data in frames[:10]]
        assert len(gets) == 40  # another bundle: its own entry
        settings.STORAGE_CACHE_DIR = tmp_path / "another-machine"
        assert object_reads.frames_read_kept(default_storage, names) == [data for _, data in frames]
        assert len(gets) == 70  # nothing kept there yet
    finally:
        events.unregister("before-call.s3.GetObject", record)


def test_a_bundle_with_a_missing_frame_is_not_kept(s3_storage):
    store.objects_put(default_storage, [("frames/p/e/a.png", b"a"), ("frames/p/e/b.png", b"b")])
    names = ["frames/p/e/a.png", "frames/p/e/gone.png", "frames/p/e/b.png"]
    with pytest.raises(FileNotFoundError):
        object_reads.frames_read_kept(default_storage, names)
    assert services.file_cache().entries() == []
    store.objects_put(default_storage, [("frames/p/e/gone.png", b"back")])
    assert object_reads.frames_read_kept(default_storage, names) == [b"a", b"back", b"b"]
