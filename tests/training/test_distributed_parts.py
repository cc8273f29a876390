"""The parts of data-parallel training that need no second process: config fields, sharding rules, the
torchrun command line and how a failed run is explained."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DistributedSampler

from training.jobs.launch import DistributedJobFailed, failure_message, outcome_read, root_cause, torchrun_command
from training.kit import distributed
from training.kit.parallel_config import DistributedSettings
from training.kit.reporting import JobCancelled, MemoryReporter
from training.resnet.config import ConfigError, ResNetConfig
from training.vlm.config import VLMTrainConfig
from training.vlm.data import TrendWindow
from training.vlm.train import _Batches

TORCHRUN_FAILURE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
training.jobs.rank_main FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-26_06:57:25
  host      : gpu-a
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 30371)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 30371
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_06:57:24
  host      : gpu-a
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 30372)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 30372
=======================================================
"""


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"processes": 0}, "processes must be an integer between 1 and 64"),
        ({"processes": 65}, "processes must be"),
        ({"processes": "2"}, "processes must be"),
        ({"processes": True}, "processes must be"),
        ({"nodes": 0}, "nodes must be an integer between 1 and 64"),
        ({"master_addr": "node 0"}, "master_addr"),
        ({"master_addr": ""}, "master_addr"),
        ({"master_port": 80}, "master_port must be an integer between 1024 and 65535"),
    ],
)
def test_both_kinds_refuse_bad_distributed_fields_naming_them(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        ResNetConfig(**overrides)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=message):
        VLMTrainConfig(base_model_path=str(tmp_path), **overrides)


def test_distributed_fields_round_trip_and_default_to_one_process():
    config = ResNetConfig.from_dict({"processes": 4, "nodes": 2, "master_addr": "10.0.0.5", "master_port": 29400})
    spread = DistributedSettings.from_config(config.to_dict())
    assert (spread.processes, spread.nodes, spread.world_size) == (4, 2, 8)
    assert spread.master_addr == "10.0.0.5" and spread.master_port == 29400
    assert DistributedSettings.from_config(ResNetConfig().to_dict()).world_size == 1
    assert DistributedSettings.from_config({}).world_size == 1  # configs stored before these fields existed


@pytest.mark.parametrize(("length", "world"), [(16, 2), (17, 2), (10, 4), (5, 3)])
def test_shard_follows_distributed_sampler_and_covers_the_order(length, world):
    order = torch.randperm(length, generator=torch.Generator().manual_seed(length))
    parts = [distributed.shard(order, rank, world) for rank in range(world)]
    for rank, part in enumerate(parts):
        sampler = DistributedSampler(range(length), num_replicas=world, rank=rank, shuffle=False)
        assert part.tolist() == order[list(sampler)].tolist()
        assert len(part) == distributed.shard_size(length, world)
    seen = torch.cat(parts).tolist()
    assert set(seen) == set(order.tolist())
    assert len(seen) - length == -length % world  # only the padding repeats
    if length % world == 0:
        assert len(set(seen)) == len(seen)


def test_ranks_take_one_gpu_each_with_nccl_and_gloo_on_the_cpu(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed.pick_backend("auto") == ("gloo", "cpu")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        distributed.pick_backend("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the choice on a 2-GPU machine
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert distributed.pick_backend("auto") == ("nccl", "cuda:1")
    assert distributed.pick_backend("cpu") == ("gloo", "cpu")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(RuntimeError, match="local rank 2 has no GPU: this machine has 2"):
        distributed.pick_backend("cuda")


def test_alone_every_helper_is_a_no_op():
    assert distributed.current().world_size == 1 and distributed.is_main()
    order = torch.arange(7)
    assert distributed.shard(order) is order
    model = torch.nn.Linear(2, 1)
    assert distributed.wrap(model) is model
    assert distributed.all_reduce_mean([1.0, 2.0]) == [1.0, 2.0]
    assert distributed.agree(False) is False and distributed.agree(True) is True
    assert distributed.gather_objects({"a": 1}) == [{"a": 1}]
    inner = MemoryReporter(cancel_after_steps=1)
    reporter = distributed.RankReporter(inner)
    reporter.log("hello")
    assert not reporter.should_cancel()
    reporter.report_step(1, 10, train_loss=0.5)
    assert reporter.should_cancel() and inner.lines == ["hello"] and inner.steps[0]["train_loss"] == 0.5


def _windows(count: int) -> list[TrendWindow]:
    return [
        TrendWindow(main_frames=[], extra_frames=[], label=["positive", "negative", "unclear"][i % 3])
        for i in range(count)
    ]


@pytest.mark.parametrize(("count", "batch_size"), [(12, 3), (9, 3), (10, 1)])
def test_vlm_batches_give_each_rank_its_own_part_of_every_pass(count, batch_size, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    config = VLMTrainConfig(base_model_path=str(tmp_path), batch_size=batch_size, balance="none", seed=3)
    windows = _windows(count)
    ranks = [_Batches(windows, config, rank=rank, world_size=2) for rank in range(2)]
    share = distributed.shard_size(count, 2)
    drawn: list[list[int]] = [[], []]
    while len(drawn[0]) < 3 * share:  # three passes
        for rank, batches in enumerate(ranks):
            batch = batches.next()
            assert len(batch) == batch_size
            drawn[rank].extend(batch)
    for start in range(0, 3 * share, share):
        first, second = drawn[0][start : start + share], drawn[1][start : start + share]
        assert set(first) | set(second) == set(range(count))
        if count % 2 == 0:
            assert set(first).isdisjoint(second)
        else:
            assert len(set(first) & set(second)) <= 1  # the one padded window
    alone = _Batches(windows, config)
    one_pass = [i for _ in range(-(-count // batch_size)) for i in alone.next()]
    assert sorted(one_pass[:count]) == list(range(count))  # one process: every window once per pass, as before


def test_vlm_balanced_draws_are_split_between_ranks(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    config = VLMTrainConfig(base_model_path=str(tmp_path), batch_size=2, balance="sample", seed=5)
    windows = _windows(9)
    both = [_Batches(windows, config, rank=rank, world_size=2).next() for rank in range(2)]
    alone = _Batches(windows, VLMTrainConfig(base_model_path=str(tmp_path), batch_size=4, balance="sample", seed=5))
    global_draw = alone.next()
    assert both == [global_draw[0::2], global_draw[1::2]]


def test_torchrun_command_for_one_node_and_for_several(tmp_path):
    one = torchrun_command(DistributedSettings(processes=2), job_id=7, attempt=1, out_dir=tmp_path)
    assert one[1:4] == ["-m", "torch.distributed.run", "--nproc-per-node=2"] and "--standalone" in one
    assert one[-4:] == ["training.jobs.rank_main", "7", "--attempt=1", f"--out={tmp_path}"]
    spread = DistributedSettings(processes=4, nodes=3, master_addr="10.0.0.5", master_port=29400)
    many = torchrun_command(spread, job_id=7, attempt=2, out_dir=tmp_path, node_rank=2)
    assert "--standalone" not in many
    assert {"--nnodes=3", "--node-rank=2", "--master-addr=10.0.0.5", "--master-port=29400", "--max-restarts=0"} <= set(
        many
    )


def test_a_rank_killed_without_a_word_is_named_from_torchruns_report(tmp_path):
    assert root_cause(TORCHRUN_FAILURE)["rank"] == "1 (local_rank: 1)"
    (tmp_path / "torchrun.log").write_text(TORCHRUN_FAILURE)
    (tmp_path / "rank_0.error.json").write_text(
        json.dumps({"rank": 0, "host": "gpu-a", "error": "RuntimeError: gloo: Connection reset", "peer_failure": True})
    )
    message = failure_message(tmp_path, 1, world_size=2)
    assert message and message.startswith("rank 1 of 2 died on gpu-a: exit code -9") and "SIGKILL" in message


def test_a_rank_s_own_error_wins_over_the_broken_collectives_it_caused(tmp_path):
    (tmp_path / "torchrun.log").write_text(TORCHRUN_FAILURE)
    for rank, error, peer in (
        (0, "RuntimeError: Connection closed by peer", True),
        (1, "ValueError: bad batch", False),
    ):
        (tmp_path / f"rank_{rank}.error.json").write_text(
            json.dumps({"rank": rank, "host": "gpu-b", "error": error, "peer_failure": peer})
        )
    with pytest.raises(DistributedJobFailed, match=r"^rank 1 of 2 failed on gpu-b: ValueError: bad batch$"):
        outcome_read(tmp_path, 1, world_size=2)


def test_outcome_read_gives_rank_zeros_result_or_its_cancellation(tmp_path):
    (tmp_path / "result.json").write_text(
        json.dumps(
            {"status": "succeeded", "result": {"checkpoint_path": "checkpoints/job_3/best", "metrics": {"a": 1}}}
        )
    )
    assert outcome_read(tmp_path, 0, world_size=2).checkpoint_path == "checkpoints/job_3/best"
    (tmp_path / "result.json").write_text(json.dumps({"status": "cancelled", "message": "cancelled at step 4"}))
    with pytest.raises(JobCancelled, match="step 4"):
        outcome_read(tmp_path, 0, world_size=2)
    with pytest.raises(JobCancelled):
        outcome_read(tmp_path, None, world_size=2, stopped=True)


@pytest.fixture
def ready_snapshot(labeled_project):
    from training.snapshots.services import snapshot_create

    return snapshot_create(project=labeled_project, options={"val_split": 0.34, "trend": False, "png_folders": False})


@pytest.mark.django_db
def test_api_takes_the_distributed_fields_in_config_and_refuses_bad_ones(user_client, ready_snapshot, settings):
    settings.TRAINING_MAX_PROCESSES = 2  # an admin allows two processes per node on any host
    url = f"/api/projects/{ready_snapshot.project_id}/jobs"
    body = {"snapshot": ready_snapshot.number, "config": {"epochs": 1, "processes": 0}}
    bad = user_client.post(url, body, content_type="application/json")
    assert bad.status_code == 400 and "processes must be an integer between 1 and 64" in bad.json()["detail"]
    body["config"] = {"epochs": 1, "processes": 2, "nodes": 2, "master_addr": "10.0.0.5"}
    made = user_client.post(url, body, content_type="application/json")
    assert made.status_code == 201, made.content
    config = made.json()["config"]
    assert (config["processes"], config["nodes"], config["master_addr"], config["master_port"]) == (
        2,
        2,
        "10.0.0.5",
        29500,
    )


@pytest.mark.django_db
def test_job_form_shows_the_distributed_fields_and_passes_them_on(user_client, ready_snapshot, settings):
    from training.models import TrainingJob

    settings.TRAINING_MAX_PROCESSES = 2

    project = ready_snapshot.project
    page = user_client.get(f"/projects/{project.pk}/training/")
    assert b"Processes per node" in page.content and b'name="master_port"' in page.content
    form = {
        "snapshot": ready_snapshot.pk,
        "kind": "resnet",
        "arch": "resnet18",
        "hidden_dim": 16,
        "dropout": 0.1,
        "image_height": 32,
        "image_width": 32,
        "lr": 1e-3,
        "weight_decay": 0,
        "grad_clip": 1,
        "warmup_steps": 0,
        "batch_size": 8,
        "epochs": 1,
        "crop_padding": 4,
        "patience": 0,
        "min_delta": 0.001,
        "seed": 1,
        "device": "cpu",
        "num_threads": 1,
        "processes": 2,
    }
    bad = user_client.post(f"/projects/{project.pk}/training/jobs/new", {**form, "processes": 65})
    assert bad.status_code == 400 and not TrainingJob.objects.exists()
    made = user_client.post(f"/projects/{project.pk}/training/jobs/new", form)
    assert made.status_code == 302
    config = TrainingJob.objects.get().config
    assert (config["processes"], config["nodes"], config["master_addr"]) == (2, 1, "127.0.0.1")
