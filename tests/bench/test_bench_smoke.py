"""Every bench in bench/ runs end to end at its `--smoke` size, started as a user starts it (this Python, the
script's path, the repository as working directory), exits 0 and prints its table. Nothing is timed here: a
bench's figures are for people, and a smoke run's mean nothing; what is checked is that the bench still runs
against today's code (bench/labeling.py once timed out for weeks, unnoticed, after roles landed).

Benches that migrate a database of their own get a copy of one SQLite file migrated once for the session (the
same database they make by default, without paying for the migrations each time); bench/labeling.py and
bench/scale.py measure PostgreSQL and get the test database."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BENCH = ROOT / "bench"
# Modules the benches import, not benches themselves: harness.py's plumbing, reward_http.py's lean RL
# client (run by bench/inference.py and bench/reward_client_cpu.py) and design_floor.py's bare service (run by
# bench/serving_overhead.py).
LIBRARIES = {"harness.py", "reward_http.py", "design_floor.py"}
TIMEOUT_S = 540  # under pytest's 600 s: a hung bench fails with its output instead of a bare timeout

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bench-db") / "migrated.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{path}", "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=TIMEOUT_S)
    return path


@pytest.fixture
def bench_env(tmp_path, migrated_sqlite) -> dict[str, str]:
    """A bench's environment: a copy of the migrated SQLite database, scratch folders under this test's
    tmp_path, this session's Redis."""
    database = tmp_path / "bench.sqlite3"
    shutil.copyfile(migrated_sqlite, database)
    env = {key: value for key, value in os.environ.items() if key not in ("MEDIA_ROOT", "DATABASE_URL")}
    return {**env, "DATABASE_URL": f"sqlite:///{database}", "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def postgres_env(tmp_path, process_env) -> dict[str, str]:
    """A bench's environment on the test database (PostgreSQL); the test needs django_db(transaction=True)."""
    return {**process_env, "TMPDIR": str(tmp_path), "MEDIA_ROOT": str(tmp_path / "media")}


def smoke(name: str, env: dict[str, str], *options: str) -> str:
    """bench/<name>.py --smoke's standard output (with these options), once it exited 0."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--smoke", *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, (
        f"bench/{name}.py --smoke exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
        f"--- stderr\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def assert_rows(output: str, *rows: str) -> None:
    """Each row (a regular expression for the start of a line) is printed with a figure after it."""
    for row in rows:
        assert re.search(rf"^\s*{row}.*?\d", output, re.MULTILINE), f"no row {row!r} in:\n{output}"


def test_every_bench_has_a_smoke_size_and_a_test_here():
    benches = {p.stem for p in BENCH.glob("*.py") if p.name not in LIBRARIES}
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    assert benches <= tested, f"benches without a smoke test: {sorted(benches - tested)}"
    for name in benches:
        text = (BENCH / f"{name}.py").read_text()
        assert "parse_args(parser" in text and '__name__ == "__main__"' in text, f"bench/{name}.py takes no --smoke"
    for name in LIBRARIES:
        assert '__name__ == "__main__"' not in (BENCH / name).read_text(), f"bench/{name} runs: give it a smoke test"


def test_active(bench_env):
    """A ManiSkill PickCube render (one pool and one held-out episode of 16x16 frames), then the ranked and
    random orders over two rounds."""
    out = smoke("active", bench_env)
    assert re.search(r"^pool \d+ frames \([1-9]\d* success\), val \d+ \([1-9]\d* success\)", out, re.MULTILINE), out
    assert_rows(out, r"ranked seed 0: 4\(", r"random seed 0: 4\(", "ranked: labels to reach", "random: labels to reach")


def test_gpu_check(bench_env):
    """On the CPU: training, the loop beside a bare one, serving, two gloo ranks under torchrun, the VLM fixture."""
    out = smoke("gpu_check", bench_env)
    for check in (
        "resnet.loss_falls",
        "resnet.device_matches_cpu",
        "resnet.loop_throughput",
        "serving.resnet_device_matches_cpu",
        "ddp.gloo_cpu_world2",
        "vlm.served_matches_cpu",
        "vlm.fp32_matches_cpu",
        "no_django",
    ):
        assert f"PASS {check}:" in out, f"{check} did not pass:\n{out}"
    assert re.search(r"^gpu_check: PASS \(8/8 checks passed\)", out, re.MULTILINE), out


def test_gpu_serving(bench_env):
    """The whole service (web, Redis, inference worker) against the worker's scorer in process, on the CPU here: each
    row checks the served probabilities against raw before it is timed."""
    out = smoke("gpu_serving", bench_env)
    assert re.search(r"^GPU serving: ResNet18 \(hidden 256\), device cpu \(CPU\), precision fp32", out, re.MULTILINE)
    assert re.search(r"^size batch\s+service img/s\s+raw img/s\s+ratio\s+forward img/s", out, re.MULTILINE), out
    assert_rows(out, r"32\s+1\s", r"32\s+4\s", "done in")


def test_inference(bench_env):
    out = smoke("inference", bench_env)
    assert re.search(r"^scenario\s+service\s+raw limit\s+ratio\s+target$", out, re.MULTILINE), out
    assert_rows(
        out,
        r"1\. batch of 64 via REST \(images/s\)",
        r"2\. one client, median latency \(ms\)",
        "same, lean http.client worker, reference",
        r"3\. 2 clients, single images \(images/s\)",
        "latency p50",
    )
    # where the time went: the worker's own scoring (from its metrics port) and the cores each process used
    assert len(re.findall(r"means: round trip [\d.]+ ms = the worker's scoring [\d.]+ ms", out)) == 2, out
    assert re.search(r"cores busy during the burst \(of \d+\): web process [\d.]+", out), out
    assert re.search(r"the worker scored for \d+% of the burst, [\d.]+ ms per batch", out), out


def test_serving_overhead(bench_env):
    out = smoke("serving_overhead", bench_env)
    assert re.search(r"^\s+images\s+cl\s+body MB\s+round ms\s+floor ms.*TCP MB/s.*copy MB/s", out, re.MULTILINE), out
    assert_rows(
        out, r"1x32x32\s+1\s+[\d.]+\s+[\d.]+\s+[\d.]+\s", r"1x32x32\s+2\s", r"64x32x32\s+1\s", r"64x32x32\s+2\s"
    )


def test_serving_overhead_json_body(bench_env):
    """The same images as the endpoint's JSON body (base64 PNGs): served, and answered as the instant model does."""
    out = smoke("serving_overhead", bench_env, "--body", "json", "--clients", "1")
    assert "JSON bodies (base64 PNG images)" in out, out
    assert_rows(out, r"1x32x32\s+1\s+[\d.]+\s+[\d.]+\s+[\d.]+\s", r"64x32x32\s+1\s")


def test_ood_overhead(bench_env):
    """One checkpoint with and without its off-distribution statistics, a few 32 px frames."""
    out = smoke("ood_overhead", bench_env)
    assert_rows(out, "without OOD", r"overhead [+-]", r"CPU time: without .* overhead [+-]")


def test_tour_model(bench_env):
    """The run command's demo (3 episodes here), a snapshot with the form's defaults, one job from the preset."""
    out = smoke("tour_model", bench_env)
    assert re.search(r"^3 PickCube episodes at 64 px labeled by 'lifted'", out, re.MULTILINE), out
    assert re.search(r"^snapshot \(the form's defaults\): 1 of 3 episodes held out", out, re.MULTILINE), out
    assert_rows(out, r"0\s+\d+\s", "passed [01] of 1")
    # the model's OOD figures: the validation split's flagged share, the held-out episode's frames, the probes
    assert re.search(r"val_flagged [\d.]+%.*held-out episodes: \d+ of \d+ frames flagged", out), out
    assert re.search(r"^\s+uniform noise\s+8\s+[\d.]+\s+\d+%\s+[\d.]+$", out, re.MULTILINE), out


def test_ingest(bench_env):
    out = smoke("ingest", bench_env)
    assert "database: sqlite" in out
    for kind in ("binary", "multipart"):
        assert f"\n{kind} chunks (25 steps x 2 cameras" in out, out
    assert_rows(out, r"1 agents x 1 episodes\s+\d+ frames/s \| raw disk write", r"3 concurrent agents, retried chunks")
    assert len(re.findall(r"^\s+errors: 0 \(target 0\); duplicates: 0 \(target 0\)$", out, re.MULTILINE)) == 2, out


@pytest.mark.django_db(transaction=True)
def test_labeling(postgres_env):
    """The labeling page in Chromium as an annotator of the seeded project (since roles, a user without a
    membership got a 404 and the bench timed out)."""
    out = smoke("labeling", postgres_env)
    assert_rows(
        out,
        r"time to interactive \(20 steps x 2 views\)",
        r"key press -> next frame drawn \(median\)",
        r"key press -> next frame painted \(median\)",
        r"save one label, round trip \(median\)",
    )
    from projects.models import Project

    assert not Project.objects.filter(name="Bench labeling").exists(), "the bench left its project behind"


def test_lerobot(bench_env):
    """A LeRobot dataset of 2 episodes x 6 frames imported and exported, each beside its raw limit."""
    out = smoke("lerobot", bench_env)
    assert "dataset: 2 episodes x 6 frames x 1 camera(s) at 32 px" in out, out
    assert_rows(out, r"import \(decode, store\)", r"export \(read, encode\)", "  CPU s per 1,000 frames")


def test_web_kill(bench_env):
    """One of the Procfile's two web processes killed under reward clients: none of their requests lost."""
    out = smoke("web_kill", bench_env)
    assert "web processes before the kill: 2; after: 2" in out, out
    assert "lost requests: 0 (target 0)" in out and "wrong answers: 0 (target 0)" in out, out


def test_reward_client_cpu(bench_env):
    out = smoke("reward_client_cpu", bench_env)
    assert re.search(r"^client\s+CPU µs/request\s+median ms$", out, re.MULTILINE), out
    assert_rows(
        out, r"RewardClient\.compute_rewards", r"RewardClient\(session=requests\.Session\(\)\)", "LeanRewardClient"
    )


@pytest.mark.django_db(transaction=True)
def test_scale(postgres_env):
    out = smoke("scale", postgres_env)
    assert re.search(r"^measure\s+2,000\s+limit$", out, re.MULTILINE), out
    assert_rows(
        out,
        "project page  ",
        "episode list API, filtered",
        "labeling payload API",
        r"proposal generation \(per frame\)",
        r"snapshot build \(per frame written\)",
        "snapshot download, first byte",
    )


def test_same_host(bench_env):
    """Frames through shared memory (in place and copied in) and HTTP, beside a memory copy, checked answers."""
    out = smoke("same_host", bench_env)
    assert re.search(r"^ batch\s+MB\s+memcpy\s+in place\s+ratio\s+copy in", out, re.MULTILINE), out
    assert_rows(out, r"4\s+0\.01")


def test_teleop(bench_env):
    out = smoke("teleop", bench_env)
    assert_rows(out, "10 Hz, ResNet18 128x128", "20 Hz, ResNet18 128x128", "overload", "client 1: frames", "scored")
    assert "worst p95" in out and "dropped frames (reported by the server)" in out, out


def test_train(bench_env):
    out = smoke("train", bench_env)
    assert_rows(out, "bare PyTorch loop", "Reward Studio loop", "loop ratio", "Reward Studio job", "job / bare loop")


def test_vlm(bench_env):
    out = smoke("vlm", bench_env)
    assert re.search(r"^scenario \(windows/s\)\s+service\s+raw limit\s+ratio\s+batch\s+target$", out, re.MULTILINE)
    assert_rows(
        out,
        r"generation \(8 tokens\), in process: batch 1",
        r"1 stream\(s\) vs raw batch 1, run 1",
        r"8 stream\(s\) vs raw batch 8, run 1",
        r"median run, 1 stream\(s\)",
        r"median run, 8 stream\(s\)",
    )


def test_rl_scale(bench_env):
    """RLinf 0.3.0's chat clients (its own builder and HTTP client, in the interop environment) and single-image
    ResNet requests, both at once on a cold service: every answer 200, the slowest under half the timeout, the
    percentiles, and where the time went."""
    out = smoke("rl_scale", bench_env)
    assert out.count("(all 200)") == 2 and "NOT ALL 200" not in out, out
    assert "RLinf 0.3.0's prompt is the trained one: True" in out, out
    assert out.count(": within (") == 2, out
    assert_rows(out, "latency   p50", "limit     slowest", "first 200 after", "in-process scoring", "worker:")


@pytest.mark.django_db(transaction=True)
def test_rl_loop(postgres_env):
    """The whole loop against the Procfile's processes: corridor episodes ingested, the app's proposals accepted,
    a ResNet trained and deployed over the API, DI-engine's DQN on the env's reward and on the deployment's; the
    bench exits 1 (failing here) when the learned-reward policy is no better than random."""
    out = smoke("rl_loop", postgres_env)
    assert re.search(r"^labels used: [1-9]\d* \(the app's frame proposals", out, re.MULTILINE), out
    assert_rows(out, r"random\s", r"DQN on env reward\s", r"DQN on learned reward\s", "learned/env ratio")
    assert re.search(r"^reward-hacking monitor: alarm (none|RAISED) .*rl-loop-seed0 [\d.]+ over [1-9]", out, re.M), out
    from inference.models import Deployment

    deployment = Deployment.objects.get(name__startswith="corridor-reward-")
    assert deployment.status == Deployment.Status.HEALTHY and deployment.reward_type == "soft"


def test_rl_loop_gpu(bench_env):
    """On the CPU (ManiSkill's CPU simulator, one env): two PPO iterations on PickCube's dense reward, then two on
    an untrained deployment's reward through reward_client, each iteration written as a JSON line."""
    out = smoke("rl_loop_gpu", bench_env)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["run"], r["iteration"]) for r in rows] == [("env", 0), ("env", 1), ("learned", 0), ("learned", 1)]
    assert all(r["reward_ms_per_step"] > 0 for r in rows if r["run"] == "learned"), rows
    assert_rows(out, r"env\s+2\s", r"learned\s+2\s")


def test_object_store(bench_env):
    """Frames written, a snapshot published and read cold and warm, frames served: SeaweedFS against local files."""
    out = smoke("object_store", bench_env)
    assert_rows(out, r"ingest frames/s\s", r"training start cold s\s", r"training start warm s\s", r"frame serving")
