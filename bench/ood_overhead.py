"""What scoring a frame's out-of-distribution distance costs the ResNet scorer (training.resnet.ood): the same
batches scored by one checkpoint with and without its `ood.safetensors`, alternately, median of the repeats, the
overhead printed beside its limit (5%: the statistics are a few matrix products on features the forward pass
already has), and the same in the process's CPU time (steadier on a busy, shared machine). On a shared machine both
move by more than 5% between runs of the same code, so the bench also times the OOD work itself inside each scored
call (the stages' pooling in the forward hooks and the distances, `training.resnet.ood.pooled` and `ood_scores`)
and prints its share of that call: both parts of one call see the same load, so the share is the steady figure.

    python bench/ood_overhead.py [--size 128] [--batch 64] [--repeats 7] [--device cpu] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))
import harness  # noqa: E402

from training.kit.family_parts import ModelSpec  # noqa: E402
from training.resnet.checkpoint import save_checkpoint  # noqa: E402
from training.resnet.config import ResNetConfig  # noqa: E402
from training.resnet.model import RewardResNet  # noqa: E402
from training.resnet.ood import OOD_FILE, ood_fit_folder  # noqa: E402
from training.resnet.scorer import ResNetScorer  # noqa: E402
from training.synthetic import make_scenes  # noqa: E402

LIMIT_PERCENT = 5.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    args = harness.parse_args(parser, size=32, batch=4, repeats=1)
    torch.manual_seed(0)
    config = ResNetConfig(image_size=[3, args.size, args.size])
    model = RewardResNet(config).eval()
    labels = [i % 2 for i in range(128)]
    frames = make_scenes(labels, args.size, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        with_ood, without = Path(tmp) / "with", Path(tmp) / "without"
        save_checkpoint(model, config, with_ood, metrics={}, step=1)
        ood_fit_folder(with_ood, model, frames[:96], labels[:96], frames[96:])
        shutil.copytree(with_ood, without)
        (without / OOD_FILE).unlink()
        scorers = {
            name: ResNetScorer(ModelSpec(kind="resnet", folder=folder, device=args.device))
            for name, folder in (("without", without), ("with", with_ood))
        }
        batch = make_scenes([i % 2 for i in range(args.batch)], args.size, seed=1)
        times: dict[str, list[float]] = {name: [] for name in scorers}
        cpu: dict[str, list[float]] = {name: [] for name in scorers}
        for scorer in scorers.values():
            scorer.score(batch)  # warm
        ood_work = OodWorkClock()
        for _ in range(args.repeats):
            for name, scorer in scorers.items():
                started, cpu_started = time.perf_counter(), time.process_time()
                with ood_work.timing(name == "with"):
                    scorer.score(batch)
                times[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - cpu_started)
                if name == "with":
                    ood_work.shares.append(ood_work.spent / times[name][-1])
    base, ood = statistics.median(times["without"]), statistics.median(times["with"])
    print(f"{args.batch} frames {args.size}px on {args.device}, torch threads {torch.get_num_threads()}")
    print(f"without OOD {base * 1e3:.1f} ms, with OOD {ood * 1e3:.1f} ms")
    print(f"overhead {100 * (ood / base - 1):+.1f}% (limit +{LIMIT_PERCENT:.0f}%)")
    # on a shared, busy machine the process's own CPU time moves less with the other processes than the clock
    base_cpu, ood_cpu = statistics.median(cpu["without"]), statistics.median(cpu["with"])
    print(
        f"CPU time: without {base_cpu * 1e3:.1f} ms, with {ood_cpu * 1e3:.1f} ms, "
        f"overhead {100 * (ood_cpu / base_cpu - 1):+.1f}%"
    )
    share = statistics.median(ood_work.shares)
    print(
        f"OOD work inside the scored call (pooling + distances): {100 * share:.2f}% of it, median of "
        f"{len(ood_work.shares)} (limit {LIMIT_PERCENT:.0f}%; highest {100 * max(ood_work.shares):.2f}%)"
    )


class OodWorkClock:
    """Times `training.resnet.ood.pooled` (called by the scorer's forward hooks) and the scorer's `ood_scores`
    while `timing(True)`; `spent` is the last timed call's total."""

    def __init__(self) -> None:
        import training.resnet.ood as ood
        import training.resnet.scorer as scorer

        self.spent, self.on, self.shares = 0.0, False, []  # type: ignore[var-annotated]
        for module, name in ((ood, "pooled"), (scorer, "ood_scores")):
            setattr(module, name, self._timed(getattr(module, name)))

    def _timed(self, function):
        def timed(*args, **kwargs):
            if not self.on:
                return function(*args, **kwargs)
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - started

        return timed

    @contextlib.contextmanager
    def timing(self, on: bool):
        self.spent, self.on = 0.0, on
        try:
            yield
        finally:
            self.on = False


if __name__ == "__main__":
    main()
