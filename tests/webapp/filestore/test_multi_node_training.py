"""Issue 36: a data-parallel job on two nodes that share no disk (each its own data folder and cache), with the
files on the object store: each node fetches the snapshot into its own cache, global rank 0 alone writes the
checkpoint, node 0's worker publishes it, and a retried job resumes on both nodes from rank 0's state."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.files.storage import default_storage

from common.filestore.cache import FileCache
from common.filestore.publish import folder_manifest
from tests.conftest import ROOT, free_port
from tests.training.conftest import seed_episodes
from training.datasets.rlinf_binary import read_payload
from training.kit.reporting import JobCancelled, MemoryReporter
from training.kit.resume import state_path
from training.models import TrainedModel, TrainingJob
from training.resnet.config import ResNetConfig
from training.resnet.train import train_reward_model
from training.services import job_create
from training.snapshots.services import snapshot_create
from training.storage import local_path

pytestmark = pytest.mark.slow

NODE_0 = """
import sys
import django
django.setup()
from training.services import job_execute
print(job_execute(job_id=int(sys.argv[1]), worker="node-0"))
"""
CONFIG = {"hidden_dim": 8, "image_size": [3, 16, 16], "epochs": 2, "batch_size": 4, "warmup_steps": 0}


@dataclass
class _StopAfterAnEpoch(MemoryReporter):
    def should_cancel(self) -> bool:
        return bool(self.epochs)


def _machine(home: Path, env: dict[str, str]) -> dict[str, str]:
    """A machine's environment: its own data folder, media folder and cache; nothing shared but the services."""
    return {
        **env,
        "RS_DATA_DIR": str(home),
        "MEDIA_ROOT": str(home / "media"),
        "STORAGE_CACHE_DIR": str(home / "cache"),
    }


def _epoch_one_state(job: TrainingJob, snapshot, out_dir: Path) -> None:
    """The resume state a first attempt left on node 0 after its first epoch (trained here, alone)."""
    config = ResNetConfig.from_dict(job.config)
    train = read_payload(local_path(snapshot.folder) / "train.pt")
    val = read_payload(local_path(snapshot.folder) / "val.pt")
    with pytest.raises(JobCancelled):
        train_reward_model(
            config, train["images"], train["labels"], val["images"], val["labels"], out_dir=out_dir,
            reporter=_StopAfterAnEpoch(),
        )  # fmt: skip
    assert state_path(out_dir).is_file()


@pytest.mark.django_db(transaction=True)
def test_two_nodes_without_a_shared_disk_fetch_their_own_snapshot_and_node_0_alone_publishes(
    project, process_env, s3_storage, tmp_path
):
    seed_episodes(project, episodes=4, steps=6, size=16, windows=False)  # frames on the object store
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False, "png_folders": False})
    assert snapshot.status == "ready", snapshot.error
    spread = {"processes": 1, "nodes": 2, "master_addr": "127.0.0.1", "master_port": free_port()}
    # not queued: node 0 below is the worker that runs it (the suite's session Celery worker, on the web's disk,
    # would take a queued job first)
    job = job_create(project=project, snapshot=snapshot, config={**CONFIG, "num_threads": 1, **spread}, enqueue=False)
    nodes = [tmp_path / "node-0", tmp_path / "node-1"]
    env = {**process_env, **s3_storage, "TRAINING_RENDEZVOUS_TIMEOUT_SECONDS": "240"}
    # a retried job: its first attempt left a resume state after epoch 1 in node 0's work folder (only rank 0
    # saves one); node 1 has none, and would train epoch 1 again while rank 0 goes on to epoch 2 without it
    _epoch_one_state(job, snapshot, nodes[0] / "cache" / "work" / job.checkpoint_folder)

    node_0 = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(NODE_0), str(job.pk)],
        cwd=ROOT,
        env=_machine(nodes[0], env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while TrainingJob.objects.get(pk=job.pk).status != "running":  # node 0 waits at the rendezvous
            assert node_0.poll() is None, node_0.communicate()[0]
            assert time.monotonic() < deadline, "node 0 never took the job"
            time.sleep(0.2)
        node_1 = subprocess.run(
            [sys.executable, "manage.py", "training_node", str(job.pk), "--node-rank", "1"],
            cwd=ROOT,
            env=_machine(nodes[1], env),
            capture_output=True,
            text=True,
            timeout=300,
        )
        output_0 = node_0.communicate(timeout=120)[0]
    finally:
        if node_0.poll() is None:
            node_0.kill()
            node_0.wait()
    assert node_1.returncode == 0, node_1.stdout + node_1.stderr
    assert "its ranks finished" in node_1.stdout
    job = TrainingJob.objects.get(pk=job.pk)
    assert node_0.returncode == 0 and job.status == "succeeded", f"{output_0}\n{job.error}\n{job.log}"

    # both ranks resumed from rank 0's epoch-1 state: only epoch 2 was trained, on both halves
    assert "resumed from the checkpoint at epoch 1" in job.log, job.log
    assert job.summary["epochs_run"] == 2 and job.summary["distributed"]["world_size"] == 2
    # each node fetched the snapshot into its own cache; neither wrote to a media folder
    for home in nodes:
        assert snapshot.folder in [entry.name for entry in FileCache(home / "cache", 1 << 30).entries()], home
        assert not (home / "media").exists()
    # rank 0 alone wrote the checkpoint: node 1's work folder holds no file of it (no model, no resume state)
    node_1_work = nodes[1] / "cache" / "work" / job.checkpoint_folder
    assert [p for p in node_1_work.rglob("*") if p.is_file()] == []
    # node 0's worker published it complete, and the model row points at it
    manifest = folder_manifest(default_storage, job.checkpoint_folder)
    assert manifest is not None
    assert {rel.split("/")[0] for rel in manifest["files"]} == {"best", "last", "shards.json"}
    model = TrainedModel.objects.get(job=job)
    assert folder_manifest(default_storage, model.checkpoint_path) is not None
    shards = json.loads((local_path(job.checkpoint_folder) / "shards.json").read_text())["ranks"]
    assert [r["rank"] for r in shards] == [0, 1] and all(r["indices"] for r in shards)
    first, second = (set(r["indices"]) for r in shards)
    assert first.isdisjoint(second)
