"""Start-up checks: a worker without what it needs to reach its files says so in one line and stops."""

from __future__ import annotations

import os
import subprocess
import sys

from common.filestore.checks import storage_problems

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_local_storage_needs_nothing(settings):
    settings.STORAGE_BACKEND = "local"
    assert storage_problems() == []


def test_an_object_store_without_bucket_or_credentials_names_both(settings, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    settings.STORAGE_BACKEND, settings.S3_BUCKET = "s3", ""
    settings.S3_ACCESS_KEY_ID = settings.S3_SECRET_ACCESS_KEY = ""
    settings.STORAGE_CACHE_DIR = tmp_path / "cache"
    problems = storage_problems()
    assert len(problems) == 2
    assert "S3_BUCKET" in problems[0] and "no storage credentials" in problems[1]
    settings.S3_BUCKET, settings.S3_ACCESS_KEY_ID, settings.S3_SECRET_ACCESS_KEY = "b", "k", "s"
    assert storage_problems() == []


def test_a_celery_worker_without_storage_credentials_stops_saying_why(tmp_path):
    env = {**os.environ, "STORAGE_BACKEND": "s3", "S3_BUCKET": "rs-bucket", "RS_DATA_DIR": str(tmp_path)}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    env.update(AWS_EC2_METADATA_DISABLED="true", S3_ACCESS_KEY_ID="", S3_SECRET_ACCESS_KEY="")
    args = [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "startup-check-test", "--pool", "solo"]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("start-up check failed: no storage credentials"), done.stderr[-2000:]


def test_a_management_command_runs_the_checks(tmp_path):
    env = {**os.environ, "STORAGE_BACKEND": "s3", "S3_BUCKET": "", "RS_DATA_DIR": str(tmp_path)}
    env.update(S3_ACCESS_KEY_ID="k", S3_SECRET_ACCESS_KEY="s")
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "(filestore.E001) STORAGE_BACKEND=s3 without S3_BUCKET" in done.stderr
