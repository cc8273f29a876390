"""Done-when of issue 36: the web process, a Celery worker (ingest, snapshots, training, exports) and an
inference worker, each with its own data, media and model folder and cache, share nothing but PostgreSQL,
Redis and the object store (SeaweedFS). Episodes are ingested through the web, labeled, snapshotted and
trained by the worker (a ResNet; the tiny VLM in the second test), deployed and asked for rewards, a LeRobot
export and a frame are downloaded through the web; every file goes through the bucket, and no process's media
folder is ever created."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from django.core.files.storage import default_storage
from django.test import Client

from common.filestore.cache import FileCache
from common.filestore.publish import folder_manifest
from inference.broker import WORKERS_KEY
from tests.conftest import _spawn, _stop, _wait_for_port, free_port
from tests.inference.conftest import deploy
from tests.labeling.ingest_helpers import step_rows
from tests.object_store import s3_client
from training.models import DatasetSnapshot, TrainedModel, TrainingJob
from training.synthetic import make_scene

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
EPISODES, STEPS, SIZE = 4, 6, 16
WEB_ONLY = {"TRAINING_MODELS_ON_WEB"}  # settings of the web process alone in the tested layout


def _png(done: bool, rng) -> bytes:
    from common.images.checks import encode_array

    return encode_array(make_scene(done, SIZE, rng), max_side=4096, max_pixels=1 << 24).data


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.2)
    return value


def stack_envs(homes: dict[str, Path], env: dict[str, str], secret_key: str) -> dict[str, dict[str, str]]:
    """Each process's settings: the shared services' (`env`: database, Redis, the object store) and a data,
    media, model folder and cache of its own under `homes[name]`."""
    return {
        name: {
            **env,
            "RS_DATA_DIR": str(home),
            "MEDIA_ROOT": str(home / "media"),
            "MODEL_DIR": str(home / "models"),
            "STORAGE_CACHE_DIR": str(home / "cache"),
            "STORAGE_CACHE_MAX_MB": "512",  # a bound each machine sets for its own disk
            "SECRET_KEY": secret_key,  # shared, not a file in a data folder: sessions and signatures
            # the web has no models (the workers have theirs): a job's model paths are checked by its worker
            **({"TRAINING_MODELS_ON_WEB": "0"} if name == "web" else {}),  # WEB_ONLY
        }
        for name, home in homes.items()
    }


def test_every_setting_the_readme_scaling_out_names_for_files_is_set_in_the_tested_layout(tmp_path):
    """docs/operations.md "Scaling out", its Files and Database/Redis items: every setting named there is one this test's
    stack gives each process (the web's own ones, `WEB_ONLY`, the web), so the section describes the layout as
    tested."""
    from tests.conftest import ROOT
    from tests.object_store import s3_env

    operations = (ROOT / "docs" / "operations.md").read_text()
    section = operations.split("## Scaling out", 1)[1].split("\n## ", 1)[0]
    items = [item for item in section.split("\n- ") if item.startswith(("**Database**", "**Redis**", "**Files**"))]
    named = {name for item in items for name in re.findall(r"`([A-Z][A-Z0-9_]{2,})(?:=[^`]*)?`", item)}
    assert {"STORAGE_BACKEND", "S3_BUCKET", "STORAGE_CACHE_DIR", "DATABASE_URL", "REDIS_URL"} <= named, named
    shared = {"DATABASE_URL": "postgres://", "REDIS_URL": "redis://", **s3_env("http://127.0.0.1:1", "rs-readme")}
    homes = {name: tmp_path / name for name in ("web", "celery", "inference")}
    for name, env in stack_envs(homes, shared, "key").items():
        missing = sorted((named - WEB_ONLY if name != "web" else named) - set(env))
        assert not missing, (
            f"docs/operations.md's Scaling out names {missing}, which the tested {name} process is not given"
        )


def _redis_env(url: str) -> dict[str, str]:
    return {"REDIS_URL": url, "CELERY_BROKER_URL": url, "CELERY_RESULT_BACKEND": url}


@contextlib.contextmanager
def _stack(homes: dict[str, Path], env: dict[str, str], secret_key: str, logs: str) -> Iterator[str]:
    """The web (uvicorn), a Celery worker (every queue) and an inference worker, each with its own data,
    media, model folder and cache under `homes[name]`; the web's base URL once it listens. `env`'s Redis is the
    test's own (`own_redis`): the session's workers, on the web's disk, take every task queued on REDIS_URL, so the
    test queues its work through this web, as a user does."""
    import redis

    envs = stack_envs(homes, env, secret_key)
    port, procs = free_port(), []
    web_args = [sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1"]
    web_args += ["--port", str(port), "--no-proxy-headers", "--log-level", "warning"]
    celery_args = [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "ingest,training,inference,default"]
    celery_args += ["--pool", "solo", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    inference_args = [sys.executable, "manage.py", "inference_worker", "--threads", "1"]
    inference_args += ["--metrics-port", str(free_port())]
    redis.Redis.from_url(env["REDIS_URL"]).delete(WORKERS_KEY)
    try:
        procs.append(_spawn(web_args, envs["web"], f"{logs}-web.log"))
        procs.append(_spawn(celery_args, envs["celery"], f"{logs}-celery.log"))
        procs.append(_spawn(inference_args, envs["inference"], f"{logs}-inference.log"))
        _wait_for_port(port, procs[0], timeout=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        for proc in procs:
            _stop(proc)


def _queue(agent: requests.Session, base: str, path: str, body: dict) -> dict:
    """POST through the stack's web (201 or 202): the row it made."""
    answer = agent.post(f"{base}{path}", json=body, timeout=60)
    assert answer.status_code in (201, 202), answer.text
    return answer.json()


def _ingest_labeled_episodes(agent: requests.Session, base: str, project, s3_storage: dict) -> list[str]:
    """Episodes ingested through the web and labeled by hand (half succeed midway); their frames land in the
    bucket: returns the frames' keys."""
    from labeling.models import Episode, FrameLabel

    rng = np.random.default_rng(0)
    for number in range(EPISODES):
        episode_id = str(uuid.uuid4())
        body = {"project": project.name, "uuid": episode_id, "env_id": "PickCube-v1"}
        assert agent.post(f"{base}/api/episodes", json=body, timeout=60).status_code in (200, 201)
        success_from = STEPS // 2 if number % 2 == 0 else STEPS
        files = {
            f"frame.{i}.{camera}": io.BytesIO(_png(i >= success_from, rng))
            for i in range(STEPS)
            for camera in project.camera_views
        }
        answer = agent.post(
            f"{base}/api/episodes/{episode_id}/steps",
            data={"steps": json.dumps(step_rows(range(STEPS)))},
            files=files,
            timeout=60,
        )
        assert answer.status_code in (200, 201), answer.text
        assert agent.post(f"{base}/api/episodes/{episode_id}/finish", json={}, timeout=60).status_code == 200
        episode = Episode.objects.get(uuid=episode_id)
        FrameLabel.objects.bulk_create(
            FrameLabel(
                project=project,
                episode=episode,
                step=step,
                value="success" if step.index >= success_from else "fail",
                source="human",
            )
            for step in episode.steps.all()
        )
    listing = s3_client(s3_storage["S3_ENDPOINT_URL"]).list_objects_v2(Bucket=s3_storage["S3_BUCKET"])
    frames = [item["Key"] for item in listing.get("Contents", []) if item["Key"].startswith("frames/")]
    assert len(frames) == EPISODES * STEPS * len(project.camera_views)
    return frames


def _snapshot_and_train_resnet(agent: requests.Session, base: str, project) -> tuple[DatasetSnapshot, TrainedModel]:
    """A snapshot and a ResNet job queued through the web and run on the Celery worker: frames read from the
    bucket, outputs published to it."""
    options = {"val_split": 0.5, "trend": False}
    made = _queue(agent, base, f"/api/projects/{project.pk}/snapshots", {"options": options})
    snapshot = DatasetSnapshot.objects.get(pk=made["id"])
    _wait(lambda: DatasetSnapshot.objects.get(pk=snapshot.pk).status != "building", 240, "the snapshot")
    snapshot.refresh_from_db()
    assert snapshot.status == "ready", snapshot.error
    assert folder_manifest(default_storage, snapshot.folder) is not None
    config = {"hidden_dim": 8, "image_size": [3, SIZE, SIZE], "epochs": 1, "batch_size": 16, "warmup_steps": 0}
    body = {"snapshot": snapshot.number, "config": config | {"num_threads": 1, "patience": 0}}
    job = TrainingJob.objects.get(pk=_queue(agent, base, f"/api/projects/{project.pk}/jobs", body)["id"])
    finished = ("succeeded", "failed", "cancelled")
    _wait(lambda: TrainingJob.objects.get(pk=job.pk).status in finished, 300, "the training job")
    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    model = TrainedModel.objects.get(job=job)
    assert folder_manifest(default_storage, model.checkpoint_path) is not None
    return snapshot, model


def _deploy_and_ask_rewards(agent: requests.Session, base: str, model: TrainedModel, client) -> None:
    """Deployed; rewards through the web from the inference worker, which fetched the model into its cache."""
    deployment = deploy(model)
    _wait(lambda: client.hlen(WORKERS_KEY), 120, "the inference worker")
    images = np.random.default_rng(1).integers(0, 256, (3, SIZE, SIZE, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    np.save(buffer, images, allow_pickle=False)
    answer = agent.post(
        f"{base}/api/deployments/{deployment.name}/rewards",
        data=buffer.getvalue(),
        headers={"Content-Type": "application/x-npy"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text


def _check_people_downloads(base: str, user, project, frames: list[str]) -> None:
    """People: the LeRobot export and a frame, through the web, from the bucket."""
    browser = Client()
    browser.force_login(user)
    session = requests.Session()
    session.headers["Cookie"] = f"sessionid={browser.cookies['sessionid'].value}"
    export = session.get(f"{base}/projects/{project.pk}/export/lerobot/?fps=10", timeout=120)
    assert export.status_code == 200, export.text[:500]
    assert export.headers["Content-Type"] == "application/zip", (export.url, export.text[:500])
    with zipfile.ZipFile(io.BytesIO(export.content)) as archive:
        assert any(name.endswith(".parquet") for name in archive.namelist())
    assert default_storage.url(frames[0]) == f"/media/{frames[0]}"  # what the labeling page is given
    frame = session.get(f"{base}{default_storage.url(frames[0])}", timeout=60)
    assert frame.status_code == 200 and frame.content.startswith(b"\x89PNG")
    assert session.get(f"{base}/media/{frames[0]}.gone.png", timeout=60).status_code == 404


def test_web_and_workers_share_nothing_but_database_redis_and_the_object_store(
    project, user, agent_token, process_env, s3_storage, own_redis, settings, tmp_path
):
    import redis

    homes = {name: tmp_path / name for name in ("web", "celery", "inference")}
    client = redis.Redis.from_url(own_redis)
    env = {**process_env, **s3_storage, **_redis_env(own_redis)}
    with _stack(homes, env, settings.SECRET_KEY, "stack-s3") as base:
        agent = requests.Session()
        agent.headers["Authorization"] = f"Bearer {agent_token[1]}"
        frames = _ingest_labeled_episodes(agent, base, project, s3_storage)
        snapshot, model = _snapshot_and_train_resnet(agent, base, project)
        _deploy_and_ask_rewards(agent, base, model, client)
        _check_people_downloads(base, user, project, frames)

    # nothing went through a local media folder; each worker's cache holds what it read, and only that
    assert [name for name, home in homes.items() if (home / "media").exists()] == []
    cached = {name: {e.name for e in FileCache(home / "cache", 1 << 40).entries()} for name, home in homes.items()}
    assert model.checkpoint_path in cached["inference"] and snapshot.folder in cached["celery"]
    assert snapshot.folder not in cached["inference"] and snapshot.folder not in cached["web"]


def test_the_tiny_vlm_trains_on_the_worker_and_answers_through_the_web_from_the_object_store(
    project, agent_token, process_env, s3_storage, own_redis, settings, tmp_path, vlm_fixture_dir
):
    """The VLM path of the same layout: the worker builds the trend snapshot from the bucket's frames and
    fine-tunes the tiny Qwen3-VL (the smallest run the fixture allows), the inference worker fetches the
    adapter into its own cache and scores a window asked through the web. The base model is on each machine
    that runs it (its own MODEL_DIR), never in the bucket."""
    import base64

    from tests.training.conftest import seed_episodes

    homes = {name: tmp_path / name for name in ("web", "celery", "inference")}
    for models in (tmp_path / "test-models", homes["celery"] / "models", homes["inference"] / "models"):
        shutil.copytree(vlm_fixture_dir, models / "qwen3-vl")
    settings.MODEL_DIR = tmp_path / "test-models"
    seed_episodes(project, episodes=4, steps=9, size=32)  # frames written to the bucket (this process's storage)
    listing = s3_client(s3_storage["S3_ENDPOINT_URL"]).list_objects_v2(Bucket=s3_storage["S3_BUCKET"])
    frames = [item["Key"] for item in listing.get("Contents", []) if item["Key"].startswith("frames/")]
    assert len(frames) == 4 * 9 * len(project.camera_views)

    env = {**process_env, **s3_storage, **_redis_env(own_redis)}
    with _stack(homes, env, settings.SECRET_KEY, "stack-s3-vlm") as base:
        agent = requests.Session()
        agent.headers["Authorization"] = f"Bearer {agent_token[1]}"
        options = {"trend_val_split": 0.25, "png_folders": False, "seed": 1}
        made = _queue(agent, base, f"/api/projects/{project.pk}/snapshots", {"options": options})
        snapshot = DatasetSnapshot.objects.get(pk=made["id"])
        _wait(lambda: DatasetSnapshot.objects.get(pk=snapshot.pk).status != "building", 240, "the snapshot")
        snapshot.refresh_from_db()
        assert snapshot.status == "ready", snapshot.error
        config = {"lr": 5e-3, "warmup_steps": 0, "max_steps": 2, "batch_size": 3, "eval_every": 2}
        config |= {"device": "cpu", "num_threads": 1, "save_full_weights": False}
        body = {"snapshot": snapshot.number, "kind": "vlm", "config": config}
        job = TrainingJob.objects.get(pk=_queue(agent, base, f"/api/projects/{project.pk}/jobs", body)["id"])
        assert job.config["base_model_path"] == "qwen3-vl"  # relative: each worker resolves it in its MODEL_DIR
        finished = ("succeeded", "failed", "cancelled")
        _wait(lambda: TrainingJob.objects.get(pk=job.pk).status in finished, 300, "the VLM training job")
        job.refresh_from_db()
        assert job.status == "succeeded", job.error
        model = TrainedModel.objects.get(job=job)
        manifest = folder_manifest(default_storage, model.checkpoint_path)
        assert manifest is not None and "adapter/adapter_config.json" in manifest["files"]

        deployment = deploy(model)
        rng = np.random.default_rng(2)

        def png(done: bool) -> str:
            return base64.b64encode(_png(done, rng)).decode()

        window = {"main": [png(i >= 2) for i in range(5)], "extra": [png(i >= 2) for i in range(5)]}
        answer = agent.post(
            f"{base}/api/deployments/{deployment.name}/vlm/rewards", json={"windows": [window]}, timeout=180
        )
        assert answer.status_code == 200, answer.text
        item = answer.json()["items"][0]
        assert set(item["probabilities"]) == {"positive", "negative", "unclear"}
        assert sum(item["probabilities"].values()) == pytest.approx(1.0, abs=1e-3)

    assert [name for name, home in homes.items() if (home / "media").exists()] == []
    cached = {name: {e.name for e in FileCache(home / "cache", 1 << 40).entries()} for name, home in homes.items()}
    assert model.checkpoint_path in cached["inference"] and snapshot.folder in cached["celery"]
    assert snapshot.folder not in cached["inference"] and cached["web"] == set()
