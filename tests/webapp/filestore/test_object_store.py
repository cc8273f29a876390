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

from tests.object_store import s3_client
from webapp.common.filestore import services
from webapp.common.filestore.publish import MANIFEST, folder_manifest


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
from webapp.common.filestore import publish, store
real = store.upload
def slow(storage, path, name):
    real(storage, path, name)
    Path(os.environ["MARKER"]).touch()
    time.sleep(30)  # killed here, with one file uploaded
store.upload = slow
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

    from webapp.common.filestore.publish import folder_publish

    folder_publish(default_storage, folder, name)
    assert sorted((services.stored_local(name)).iterdir()) == sorted(
        services.stored_local(name) / f for f in ("a.bin", "b.bin", "c.bin")
    )


def test_files_written_beside_a_fetched_checkpoint_reach_other_machines_when_republished(
    s3_storage, settings, tmp_path
):
    name = "checkpoints/job_11/best"
    folder_publish_from = _folder(tmp_path / "trainer", {"model.safetensors": b"w" * 500})
    from webapp.common.filestore.publish import folder_publish

    folder_publish(default_storage, folder_publish_from, name)
    settings.STORAGE_CACHE_DIR = tmp_path / "celery-machine"
    (services.stored_local(name) / "val_predictions.json").write_text("[0.5]")  # the evaluation figures
    services.stored_republish(name)
    assert folder_manifest(default_storage, name)["files"].keys() == {"model.safetensors", "val_predictions.json"}
    settings.STORAGE_CACHE_DIR = tmp_path / "web-machine"
    assert (services.stored_local(name) / "val_predictions.json").read_text() == "[0.5]"
