"""GPU check of the torch side of Reward Studio, with no Django: one PASS/FAIL line per check, with timings.

Runs on a machine that has torch (and transformers, peft, torchvision for the VLM check) but none of Django,
DRF, Channels, Celery or ManiSkill; it imports only the Django-free family folders under `training/`.

1. ResNet training: `train_reward_model` (the loop a training job runs) on a small separable synthetic set
   on the device; the loss must fall and the validation accuracy reach 0.9; the last checkpoint evaluated
   on the device must match the same weights on the CPU. Then images/s of the project loop beside a bare
   PyTorch loop (bench/train.py's two loops, same model and data).
2. Serving: the ResNet family's scorer (`training.families.scorer_load`, as `manage.py inference_worker`
   loads it) from that checkpoint on the device vs on the CPU, and its images/s at batch 1 and batch 64.
3. Data-parallel training (`training.kit.distributed` under torchrun, each rank running `train_reward_model`):
   nccl with one process on the GPU (NCCL refuses two ranks on one GPU), then two gloo processes sharing the
   GPU (optional: gloo with CUDA tensors); on the CPU two gloo processes. One checkpoint must be saved (by
   rank 0), load, and the ranks' first-epoch shards must be disjoint.
4. VLM: the tiny Qwen3-VL fixture (`training.vlm.fixture`, built offline) scored through the VLM family's
   scorer on packed windows: device (bf16, as served) vs CPU (fp32), and device fp32 vs CPU fp32.

Exit status 0 when every required check passed. `--device cpu` runs the same checks on the CPU (device
vs CPU comparisons are then trivial); `--smoke` runs them all on the CPU at the smallest sizes that still
pass, on one thread (what the test suite runs). Tolerances: `--atol` (fp32 probabilities), `--atol-bf16`.

    PYTHONUNBUFFERED=1 python3 bench/gpu_check.py [--device auto|cuda|cpu] [--skip-vlm] [--skip-ddp]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after the root: bench/inference.py must not hide the package

import numpy as np  # noqa: E402
import torch  # noqa: E402
from harness import parse_args  # noqa: E402

from training.families import scorer_load  # noqa: E402
from training.kit import distributed  # noqa: E402
from training.kit.family_parts import ModelSpec  # noqa: E402
from training.kit.reporting import MemoryReporter  # noqa: E402
from training.resnet.checkpoint import WEIGHTS_FILE, load_checkpoint  # noqa: E402
from training.resnet.config import ResNetConfig  # noqa: E402
from training.resnet.model import predict_proba  # noqa: E402
from training.resnet.train import BEST, LAST, pick_device, train_reward_model  # noqa: E402
from training.synthetic import make_scenes  # noqa: E402

FORBIDDEN = ("django", "rest_framework", "channels", "celery", "mani_skill")
RESULT_FILE = "result.json"
RANK_TASK = "GPU_CHECK_RANK_TASK"  # set for the torchrun ranks this script starts
TORCHRUN_SECONDS = 120  # a data-parallel run still going after this long is killed (a hung collective)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the fixture is built in code: never wait on a network


@dataclasses.dataclass(frozen=True)
class Sizes:
    size: int  # image side of the training check
    n: int  # training images
    val: int
    epochs: int
    batch: int
    tput_size: int  # the loop-throughput comparison
    tput_n: int
    tput_batch: int
    ddp_n: int  # per data-parallel run (all ranks together)
    serve_seconds: float  # timing window per serving batch size


SIZES = {
    "cuda": Sizes(64, 1024, 128, 4, 32, 128, 2048, 64, 256, 1.0),
    "cpu": Sizes(32, 128, 64, 3, 32, 32, 128, 32, 64, 0.5),
    "smoke": Sizes(16, 64, 32, 3, 16, 16, 32, 16, 32, 0.1),  # --smoke: every check on one CPU thread, in seconds
}


class Checks:
    """Collects check outcomes and prints each as one line."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, bool, bool]] = []

    def record(self, name: str, ok: bool, detail: str, *, required: bool = True) -> None:
        status = "PASS" if ok else ("FAIL" if required else "FAIL (optional)")
        print(f"{status} {name}: {detail}", flush=True)
        self.rows.append((name, ok, required))

    def run(self, section: str, fn: Callable[[], None], *, required: bool = True) -> None:
        print(f"-- {section}", flush=True)
        started = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # a check that crashes is a failed check; the next one still runs
            traceback.print_exc()
            self.record(section, False, f"crashed: {exc.__class__.__name__}: {exc}", required=required)
        print(f"-- {section}: {time.perf_counter() - started:.1f} s", flush=True)

    def failed(self) -> list[str]:
        return [name for name, ok, required in self.rows if required and not ok]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def scenes(n: int, size: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """n separable uint8 frames (red square = success, about 40%) and their labels."""
    labels = np.random.default_rng(seed).random(n) < 0.4
    labels[:2] = [True, False]  # both classes, however small n is
    return make_scenes(labels, size, seed=seed + 1), [int(v) for v in labels]


def resnet_config(size: int, batch: int, epochs: int, device: str, **extra) -> ResNetConfig:
    return ResNetConfig(
        hidden_dim=256,
        image_size=[3, size, size],
        batch_size=batch,
        epochs=epochs,
        augment=False,
        warmup_steps=0,
        patience=0,
        device=device,
        seed=0,
        **extra,
    )


def max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def steps_mean(steps: list[dict], part: slice) -> float:
    return float(np.mean([s["train_loss"] for s in steps[part]]))


# ---- 1. ResNet training -----------------------------------------------------------------------------------


def check_training(checks: Checks, sizes: Sizes, device: torch.device, work: Path, atol: float) -> Path:
    # bn_recalibrate: a from-scratch ResNet trained for a few dozen steps has BatchNorm running statistics far
    # behind its weights; the job option recomputes them before the checkpoints are written
    config = resnet_config(sizes.size, sizes.batch, sizes.epochs, str(device), bn_recalibrate=True)
    x, y = scenes(sizes.n, sizes.size, 0)
    xv, yv = scenes(sizes.val, sizes.size, 10)
    reporter = MemoryReporter()
    sync(device)
    started = time.perf_counter()
    outcome = train_reward_model(config, x, y, xv, yv, out_dir=work / "resnet", reporter=reporter)
    sync(device)
    seconds = time.perf_counter() - started
    print(
        f"TIME resnet.train: {sizes.epochs} epochs of {sizes.n} images {sizes.size}px in {seconds:.2f} s "
        f"({sizes.n * sizes.epochs / seconds:.0f} images/s, validation and checkpoints included)"
    )
    on_device, _ = load_checkpoint(outcome.last_folder, str(device))
    on_cpu, _ = load_checkpoint(outcome.last_folder, "cpu")
    p_device, p_cpu = predict_proba(on_device, xv), predict_proba(on_cpu, xv)
    first, last = steps_mean(reporter.steps, slice(0, 5)), steps_mean(reporter.steps, slice(-5, None))
    accuracy = float(np.mean((p_device > 0.5) == np.array(yv, dtype=bool)))
    checks.record(
        "resnet.loss_falls",
        last < 0.5 * first and accuracy >= 0.9,
        f"train loss {first:.4f} (first 5 steps) -> {last:.4f} (last 5 steps); last checkpoint's accuracy on "
        f"{len(yv)} held-out images {accuracy:.3f} (need the loss halved and accuracy >= 0.9)",
    )
    diff = max_diff(p_device, p_cpu)
    checks.record(
        "resnet.device_matches_cpu",
        diff <= atol and bool(np.all(np.isfinite(p_device))),
        f"last checkpoint, {len(xv)} held-out images: max |p_{device.type} - p_cpu| = {diff:.2e} (atol {atol})"
        + (" (cpu vs cpu: trivial)" if device.type == "cpu" else ""),
    )
    return outcome.best_folder


def check_loop_throughput(checks: Checks, sizes: Sizes, device: torch.device) -> None:
    """bench/train.py's bare loop and project loop (its own functions), one run each after a warm-up."""
    spec = importlib.util.spec_from_file_location("bench_train", ROOT / "bench" / "train.py")
    assert spec and spec.loader
    bench_train = importlib.util.module_from_spec(spec)
    sys.modules["bench_train"] = bench_train  # its dataclasses look their module up while being built
    spec.loader.exec_module(bench_train)
    config = resnet_config(sizes.tput_size, sizes.tput_batch, 2, str(device))
    x, y = scenes(sizes.tput_n, sizes.tput_size, 20)
    xv, yv = scenes(32, sizes.tput_size, 30)
    images, labels = torch.from_numpy(x), torch.tensor(y, dtype=torch.float32)
    val_images, val_labels = torch.from_numpy(xv), torch.tensor(yv, dtype=torch.float32)
    warm = slice(0, 2 * sizes.tput_batch)
    bench_train.bare_loop(config, images[warm], labels[warm], val_images, val_labels, device)  # warm-up
    n = len(images) * config.epochs
    bare = bench_train.bare_loop(config, images, labels, val_images, val_labels, device).rate(n)
    loop, _job = bench_train.project_loop(config, images, labels, val_images, val_labels, device)
    project = loop.rate(n)
    ratio = project / bare
    print(
        f"TIME resnet.loop_throughput: bare PyTorch {bare:.0f} images/s, Reward Studio loop {project:.0f} images/s, "
        f"ratio {ratio:.3f} (bench/train.py target >= {bench_train.TARGET}; {sizes.tput_n} images "
        f"{sizes.tput_size}px, batch {sizes.tput_batch}, 2 epochs)"
    )
    checks.record("resnet.loop_throughput", project > 0 and bare > 0, f"ratio {ratio:.3f}")


# ---- 2. Serving ---------------------------------------------------------------------------------------------


def images_per_second(score: Callable[[np.ndarray], list], batch: np.ndarray, seconds: float) -> tuple[float, float]:
    """(images/s, ms per call) of `score(batch)` over about `seconds`, after three warm-up calls."""
    for _ in range(3):
        score(batch)
    calls, started = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - started < seconds:
        score(batch)
        calls += 1
    elapsed = time.perf_counter() - started
    return calls * len(batch) / elapsed, 1000 * elapsed / calls


def check_serving(checks: Checks, sizes: Sizes, device: torch.device, folder: Path, atol: float) -> None:
    spec = ModelSpec(kind="resnet", folder=folder, device=str(device))
    on_device, on_cpu = scorer_load(spec), scorer_load(dataclasses.replace(spec, device="cpu"))
    images, _ = scenes(64, sizes.size, 40)
    p_device, p_cpu = on_device.score(images), on_cpu.score(images)
    diff = max_diff(p_device, p_cpu)
    checks.record(
        "serving.resnet_device_matches_cpu",
        len(p_device) == 64 and diff <= atol,
        f"ResNetScorer from the best checkpoint, 64 images: max |p_{device.type} - p_cpu| = {diff:.2e} (atol {atol})",
    )
    for batch_size in (1, 64):
        rate, ms = images_per_second(on_device.score, images[:batch_size], sizes.serve_seconds)
        print(f"TIME serving.resnet batch {batch_size} on {device.type}: {rate:.0f} images/s ({ms:.2f} ms per batch)")


# ---- 3. Data-parallel training ------------------------------------------------------------------------------


def rank_worker(task: dict) -> int:
    """One torchrun rank: joins the group as a job's rank does (training.jobs.rank_main), trains, rank 0 reports."""
    mode, out, size, n = task["mode"], Path(task["out"]), task["size"], task["n"]
    if mode == "gloo-cuda":  # pick_backend gives each local rank its own GPU with nccl; here both share cuda:0
        distributed.pick_backend = lambda device: ("gloo", "cuda:0")
    info = distributed.init("cpu" if mode == "gloo-cpu" else "cuda")
    try:
        probe = torch.ones(1, device=info.device)
        torch.distributed.all_reduce(probe)  # a raw collective, also when the world is one rank
        config = resnet_config(size, 16, 2, "cpu" if mode == "gloo-cpu" else "cuda", processes=info.world_size)
        x, y = scenes(n, size, 50)
        xv, yv = scenes(32, size, 60)
        reporter = distributed.RankReporter(MemoryReporter())
        outcome = train_reward_model(
            config, x, y, xv, yv, out_dir=out / "checkpoint", reporter=reporter, resume=True, checkpoint_seconds=0
        )
        summary = distributed.shards_report(outcome.shards, out / "checkpoint", reporter) if info.distributed else {}
        if info.main:
            result = {
                "rank": info.rank,
                "world_size": info.world_size,
                "backend": info.backend,
                "device": info.device,
                "all_reduce": probe.item(),
                "history": outcome.history,
                "summary": summary,
            }
            (out / RESULT_FILE).write_text(json.dumps(result, default=str))
        return 0
    finally:
        distributed.teardown()


def check_distributed(
    checks: Checks, name: str, mode: str, processes: int, sizes: Sizes, work: Path, *, required: bool = True
) -> None:
    out = work / mode
    out.mkdir(parents=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    command += ["--max-restarts=0", str(Path(__file__).resolve())]
    task = {"mode": mode, "out": str(out), "size": sizes.size, "n": sizes.ddp_n}
    # the ranks' task goes in the environment: torchrun would take `--n=...` after the script for its own options
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", RANK_TASK: json.dumps(task)}
    started = time.perf_counter()
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=TORCHRUN_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its ranks (a hung collective)
        output, _ = proc.communicate()
    seconds = time.perf_counter() - started
    print(f"TIME {name}: torchrun with {processes} process(es) {seconds:.1f} s (start-up included)")
    if proc.returncode != 0 or not (out / RESULT_FILE).exists():
        print("\n".join(output.splitlines()[-25:]))
        checks.record(
            name, False, f"torchrun exit {proc.returncode} after {seconds:.0f} s, no {RESULT_FILE}", required=required
        )
        return
    result = json.loads((out / RESULT_FILE).read_text())
    folder = out / "checkpoint"
    saved = sorted(p.parent.name for p in folder.rglob(WEIGHTS_FILE))
    model, _ = load_checkpoint(folder / BEST, "cuda" if mode != "gloo-cpu" else "cpu")
    probs = predict_proba(model, scenes(16, sizes.size, 70)[0])
    history = result["history"]
    problems = []
    if result["world_size"] != processes or result["all_reduce"] != processes:
        problems.append(f"world {result['world_size']}, all_reduce gave {result['all_reduce']}")
    if saved != [BEST, LAST]:
        problems.append(f"weights files in {saved}, expected one best and one last")
    if not np.all((probs >= 0) & (probs <= 1)):
        problems.append("the saved checkpoint predicts outside [0, 1]")
    if not history[-1]["train_loss"] < history[0]["train_loss"]:
        problems.append("train loss did not fall")
    shards = ""
    if processes > 1:
        ranks = json.loads((folder / distributed.SHARDS_FILE).read_text())["ranks"]
        parts = [set(r["indices"]) for r in ranks]
        if len(parts) != processes or set.intersection(*parts) or len(set.union(*parts)) != sizes.ddp_n:
            problems.append(f"shards overlap or miss samples: sizes {[len(p) for p in parts]}")
        shards = f", first-epoch shards {[len(p) for p in parts]} disjoint"
    checks.record(
        name,
        not problems,
        "; ".join(problems)
        or f"{result['backend']} on {result['device']}, world {result['world_size']}, train loss "
        f"{history[0]['train_loss']:.3f} -> {history[-1]['train_loss']:.3f}{shards}, one checkpoint saved and loads",
        required=required,
    )


# ---- 4. VLM fixture -----------------------------------------------------------------------------------------


def check_vlm(checks: Checks, device: torch.device, work: Path, atol: float, atol_bf16: float) -> None:
    from transformers.utils import logging as transformers_logging

    from training.vlm.checkpoint import checkpoint_load
    from training.vlm.fixture import build_tiny_qwen3_vl
    from training.vlm.labels import LABELS
    from training.vlm.scoring import ScoreItem, TrendScorer
    from training.vlm.wire import WindowRequest, pack_windows

    transformers_logging.disable_progress_bar()
    folder = build_tiny_qwen3_vl(work / "vlm")
    rng = np.random.default_rng(80)
    windows = [
        WindowRequest(images=[rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(10)]) for _ in range(6)
    ]
    batch = pack_windows(windows)
    spec = ModelSpec(kind="vlm", folder=folder, config={"window_size": 5}, device=str(device))
    served, cpu_scorer = scorer_load(spec), scorer_load(dataclasses.replace(spec, device="cpu"))
    p_served = [r["probabilities"] for r in served.score(batch)]
    p_cpu = [r["probabilities"] for r in cpu_scorer.score(batch)]
    as_array = lambda rows: [[row[label] for label in LABELS] for row in rows]  # noqa: E731
    diff = max_diff(as_array(p_served), as_array(p_cpu))
    dtype = next(served.scorer.model.parameters()).dtype  # type: ignore[attr-defined]
    checks.record(
        "vlm.served_matches_cpu",
        len(p_served) == len(windows) and diff <= atol_bf16,
        f"VLMScorer on {len(windows)} packed windows ({served.layout} layout, {dtype} on {device.type}) vs "  # type: ignore[attr-defined]
        f"CPU fp32: max |dp| = {diff:.2e} (atol {atol_bf16})",
    )
    model, processor, _ = checkpoint_load(folder, device=str(device), bf16=False)
    fp32 = TrendScorer(model, processor, max_batch=16, layout=cpu_scorer.layout)  # type: ignore[attr-defined]
    items = [ScoreItem(list(w.images), cpu_scorer.prompt) for w in windows]  # type: ignore[attr-defined]
    diff32 = max_diff(fp32.probabilities(items), as_array(p_cpu))
    checks.record(
        "vlm.fp32_matches_cpu",
        diff32 <= atol,
        f"TrendScorer fp32 on {device.type} vs CPU fp32: max |dp| = {diff32:.2e} (atol {atol})",
    )
    rate, ms = images_per_second(served.score, batch, 1.0)
    print(f"TIME vlm.served batch {len(windows)} on {device.type}: {rate:.1f} windows/s ({ms:.1f} ms per batch)")


# ---- main ---------------------------------------------------------------------------------------------------


def third_party_modules() -> list[str]:
    roots = {name.split(".")[0] for name in sys.modules}
    local = {"training", "labeling", "bench_train", "harness", "__main__"}
    return sorted(r for r in roots - set(sys.stdlib_module_names) - local if not r.startswith("_"))


def main() -> int:
    if RANK_TASK in os.environ:
        return rank_worker(json.loads(os.environ[RANK_TASK]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (cuda when present), cuda or cpu")
    parser.add_argument("--atol", type=float, default=1e-2, help="fp32 probabilities, device vs CPU (TF32 convs)")
    parser.add_argument("--atol-bf16", type=float, default=5e-2, help="VLM probabilities served in bf16 vs CPU fp32")
    parser.add_argument("--skip-vlm", action="store_true")
    parser.add_argument("--skip-ddp", action="store_true")
    args = parse_args(parser, device="cpu")

    started = time.perf_counter()
    device = pick_device(args.device)
    sizes = SIZES["smoke" if args.smoke else device.type]
    if args.smoke:
        torch.set_num_threads(1)  # the test suite's machine is small and shared: one thread wastes no CPU waiting
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"gpu_check: device {device} ({name}), python {sys.version.split()[0]}, torch {torch.__version__} "
        f"(cuda {torch.version.cuda}), numpy {np.__version__}, {os.cpu_count()} cpus, "
        f"cudnn tf32 {torch.backends.cudnn.allow_tf32}, matmul tf32 {torch.backends.cuda.matmul.allow_tf32}",
        flush=True,
    )
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="rs-gpu-check-") as tmp:
        work = Path(tmp)
        best: list[Path] = []
        checks.run("1. resnet training", lambda: best.append(check_training(checks, sizes, device, work, args.atol)))
        checks.run("1b. resnet loop throughput", lambda: check_loop_throughput(checks, sizes, device))
        if best:
            checks.run("2. resnet serving", lambda: check_serving(checks, sizes, device, best[0], args.atol))
        else:
            checks.record("serving.resnet_device_matches_cpu", False, "no checkpoint: the training check failed")
        if args.skip_ddp:
            print("SKIP data-parallel checks (--skip-ddp)")
        elif device.type == "cuda":
            checks.run("3a. ddp nccl", lambda: check_distributed(checks, "ddp.nccl_world1", "nccl", 1, sizes, work))
            checks.run(
                "3b. ddp gloo on one gpu",
                lambda: check_distributed(checks, "ddp.gloo_cuda_world2", "gloo-cuda", 2, sizes, work, required=False),
                required=False,
            )
            checks.run(
                "3c. ddp gloo on cpu",
                lambda: check_distributed(checks, "ddp.gloo_cpu_world2", "gloo-cpu", 2, sizes, work),
            )
        else:
            checks.run(
                "3. ddp gloo on cpu",
                lambda: check_distributed(checks, "ddp.gloo_cpu_world2", "gloo-cpu", 2, sizes, work),
            )
        if args.skip_vlm:
            print("SKIP vlm check (--skip-vlm)")
        else:
            checks.run("4. vlm fixture", lambda: check_vlm(checks, device, work, args.atol, args.atol_bf16))
    loaded = third_party_modules()
    bad = [m for m in loaded if m in FORBIDDEN]
    checks.record("no_django", not bad, f"forbidden modules loaded: {bad or 'none'}; third-party: {', '.join(loaded)}")
    failed = checks.failed()
    passed = sum(ok for _, ok, _ in checks.rows)
    print(
        f"gpu_check: {'PASS' if not failed else 'FAIL'} ({passed}/{len(checks.rows)} checks passed"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + f") in {time.perf_counter() - started:.0f} s on {name}",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
