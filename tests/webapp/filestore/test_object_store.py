"""Folders on a real object store (SeaweedFS): published complete or not at all, fetched through the cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from django.core.files.storage import default_storage

from common.filestore import services
from common.filestore.publish import MANIFEST, folder_manifest
from tests.object_store import s3_client


def _folder(root, files: dict[str, bytes]):
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _keys(env) -> list[str]:
    listing = s3_client(env["S3_ENDPOINT_URL"]).list_objects_v2(Bucket=env["S3_BUCKET"])
    return sorted(item["Key"] for item in listing.get("Contents", []))


def test_a_published_folder_round_trips_through_another_machines_cache(s3_storage, settings, tmp_path):
    assert not services.storage_is_local()
    name = "checkpoints/job_7"
    _folder(services.work_folder(name), {"best/model.safetensors": b"w" * 3000, "best/config.json": b"{}"})
    services.folder_published(name)
    assert f"{name}/{MANIFEST}" in _keys(s3_storage) and f"{name}/best/{MANIFEST}" in _keys(s3_storage)

    settings.STORAGE_CACHE_DIR = tmp_path / "other-machine"  # nothing local there
    best = services.stored_local(f"{name}/best")
    assert (best / "model.safetensors").read_bytes() == b"w" * 3000
    assert str(best).startswith(str(tmp_path / "other-machine"))
    assert services.stored_folder_bytes(name) == 3002
    services.stored_folder_delete(name)
    assert _keys(s3_storage) == []
    with pytest.raises(FileNotFoundError):
        services.stored_local(f"{name}/best")


def test_nothing_in_the_bucket_is_public(s3_storage):
    default_storage.save("frames/p/x.png", __import__("io").BytesIO(b"png"))
    assert default_storage.url("frames/p/x.png") == "/media/frames/p/x.png"  # pages link the app's media view
    url = default_storage.signed_url("frames/p/x.png")
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=300" in url  # signed, for five minutes
    import urllib.error
    import urllib.request

    unsigned = url.split("?")[0]
    with pytest.raises(urllib.error.HTTPError):  # no anonymous reads
        urllib.request.urlopen(unsigned, timeout=10)  # noqa: S310 - loopback test store


SLOW_PUBLISH = """
import os, sys, time
import django
django.setup()
from pathlib import Path
from common.filestore import publish, store
real = store.uploads
def slow(storage, pairs):
    real(storage, pairs[:1])
    Path(os.environ["MARKER"]).touch()
    time.sleep(30)  # killed here, with one file uploaded
store.uploads = slow
from django.core.files.storage import default_storage
publish.folder_publish(default_storage, Path(sys.argv[1]), sys.argv[2])
"""


def test_a_publisher_killed_mid_upload_leaves_no_complete_folder_and_a_retry_completes(s3_storage, tmp_path):
    name = "checkpoints/job_9/best"
    folder = _folder(tmp_path / "work", {"a.bin": b"a" * 100, "b.bin": b"b" * 100, "c.bin": b"c" * 100})
    marker = tmp_path / "uploaded-one"
    env = {**os.environ, **s3_storage, "MARKER": str(marker), "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SLOW_PUBLISH), str(folder), name], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the publisher never uploaded a file"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert _keys(s3_storage) == [f"{name}/a.bin"]  # a file, but no manifest
    assert folder_manifest(default_storage, name) is None
    with pytest.raises(FileNotFoundError):
        services.stored_local(name)

    from common.filestore.publish import folder_publish

    folder_publish(default_storage, folder, name)
    assert sorted((services.stored_local(name)).iterdir()) == sorted(
        services.stored_local(name) / f for f in ("a.bin", "b.bin", "c.bin")
    )


def test_files_written_beside_a_fetched_checkpoint_reach_other_machines_when_republished(
    s3_storage, settings, tmp_path
):
    name = "checkpoints/job_11/best"
    folder_publish_from = _folder(tmp_path / "trainer", {"model.safetensors": b"w" * 500})
    from common.filestore.publish import folder_publish

    folder_publish(default_storage, folder_publish_from, name)
    settings.STORAGE_CACHE_DIR = tmp_path / "celery-machine"
    (services.stored_local(name) / "val_predictions.json").write_text("[0.5]")  # the evaluation figures
    services.stored_republish(name)
    assert folder_manifest(default_storage, name)["files"].keys() == {"model.safetensors", "val_predictions.json"}
    settings.STORAGE_CACHE_DIR = tmp_path / "web-machine"
    assert (services.stored_local(name) / "val_predictions.json").read_text() == "[0.5]"


def test_a_folder_of_many_files_and_a_multipart_one_round_trips_through_concurrent_transfers(
    s3_storage, settings, tmp_path, monkeypatch
):
    from common.filestore import store

    monkeypatch.setattr(store, "PART_BYTES", 5 * 1024 * 1024)  # S3's smallest part: the large file goes in parts
    files = {f"shard_{i:02d}.bin": os.urandom(1000 + i) for i in range(24)}
    files["nested/train.pt"] = os.urandom(11 * 1024 * 1024 + 7)
    name = "snapshots/many"
    _folder(services.work_folder(name), files)
    services.folder_published(name)
    assert len(_keys(s3_storage)) == len(files) + 2  # and the two manifests

    settings.STORAGE_CACHE_DIR = tmp_path / "other-machine"
    fetched = services.stored_local(name)
    assert {p.relative_to(fetched).as_posix(): p.read_bytes() for p in fetched.rglob("*") if p.is_file()} == files


def test_frames_on_the_object_store_are_put_together_and_a_failed_chunk_leaves_none(s3_storage, monkeypatch):
    from common.filestore import store
    from labeling.frame_files import frames_write

    frames = [(f"frames/p/e/{i}_main.png", b"\x89PNG" + bytes([i]) * 50) for i in range(12)]
    assert frames_write(default_storage, frames) == [name for name, _ in frames]
    assert _keys(s3_storage) == sorted(name for name, _ in frames)
    head = s3_client(s3_storage["S3_ENDPOINT_URL"]).head_object(Bucket=s3_storage["S3_BUCKET"], Key=frames[3][0])
    assert head["ContentType"] == "image/png" and head["ContentLength"] == 54
    assert store.object_read(default_storage, frames[3][0], 1 << 20) == (54, frames[3][1])  # the media view's GET
    assert store.object_read(default_storage, "frames/p/e/gone.png", 1 << 20) is None
    names = [name for name, _ in frames]
    assert store.objects_read(default_storage, names) == [data for _, data in frames]  # a labeling frame bundle
    with pytest.raises(FileNotFoundError):
        store.objects_read(default_storage, [*names[:3], "frames/p/e/gone.png"])

    real = store._client

    class Failing:
        def __init__(self, client):
            self.client = client

        def put_object(self, **kwargs):
            if kwargs["Key"].endswith("/7_main.png"):
                raise OSError("the store went away")
            return self.client.put_object(**kwargs)

    monkeypatch.setattr(store, "_client", lambda storage: Failing(real(storage)))
    again = [(name.replace("frames/p/e/", "frames/p/f/"), data) for name, data in frames]
    with pytest.raises(OSError, match="went away"):
        frames_write(default_storage, again)
    assert _keys(s3_storage) == sorted(name for name, _ in frames)  # none of the failed chunk's frames stays


def test_a_warm_start_reads_the_cache_and_asks_the_store_nothing_and_a_retried_run_one_get(
    s3_storage, settings, tmp_path
):
    name = "snapshots/p1/snapshot_3"
    _folder(services.work_folder(name), {"train.pt": b"t" * 4000, "val.pt": b"v" * 1000})
    services.folder_published(name)
    services.work_folder_drop(name)
    cold = services.stored_local(name)  # the first start on this machine fetches
    calls: list[str] = []
    events = default_storage.connection.meta.client.meta.events  # type: ignore[attr-defined]
    events.register("before-call.s3", lambda model, **kwargs: calls.append(model.name))

    assert services.stored_local(name) == cold and (cold / "train.pt").read_bytes() == b"t" * 4000
    assert calls == []  # a warm lookup: the cache alone
    checkpoint = "checkpoints/job_9"
    assert services.work_folder_resume(checkpoint, retried=False) == services.work_folder(checkpoint)
    assert calls == []  # a job's first run: nothing of it can be published yet
    assert services.work_folder_resume(checkpoint) == services.work_folder(checkpoint)
    assert calls == ["GetObject"]  # a retried run asks once: has an earlier run published a copy? (none)
    assert folder_manifest(default_storage, name)["files"].keys() == {"train.pt", "val.pt"}
    assert calls == ["GetObject", "GetObject"]  # a manifest found: one GET too
