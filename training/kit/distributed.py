"""Data-parallel training with PyTorch's own machinery (no Django): settings, rank context, sharding.

A job whose config asks for more than one process runs under `torch.distributed.run` (torchrun): one
process per GPU (or several CPU processes with the gloo backend), on one or more machines. Each process
calls `init()`, which joins the process group torchrun set up through its environment variables; the
training loops then stay almost as they are:

- `shard(order)` gives a rank its part of an epoch's shuffled order (DistributedSampler's rule: the order
  is padded by wrapping to a multiple of the world size, rank r takes every world-th index from r);
- `wrap(model)` puts the model in DistributedDataParallel, which averages gradients in `backward()`;
- `all_reduce_sum` / `agree` combine metrics and decisions so every rank takes the same branch;
- `is_main()` guards rank-0-only side effects (reports, logs, checkpoints);
- `RankReporter` lets rank 0 report while every rank agrees each step on whether to stop.

The job config's fields (processes, nodes, master) are checked in training.kit.parallel_config. Without
torchrun nothing changes: the context is a single rank and every helper is a no-op.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# How long a rank waits at a collective: rank 0 alone evaluates and saves while the others wait at the next
# step's cancel check (NCCL's default of 10 minutes is too short for evaluating a large VLM).
COLLECTIVE_TIMEOUT = timedelta(hours=2)

# ---- the rank context --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = ""
    device: str = "cpu"  # the device this rank trains on

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def describe(self) -> str:
        return f"rank {self.rank} of {self.world_size} ({self.backend}, {self.device}, {socket.gethostname()})"


_SINGLE = RankInfo()
_current: RankInfo = _SINGLE


def current() -> RankInfo:
    return _current


def is_main() -> bool:
    return _current.main


def pick_backend(device: str) -> tuple[str, str]:
    """(backend, device) for this rank: nccl with one GPU per process when CUDA is present and the job
    does not ask for the CPU, gloo on the CPU otherwise."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device != "cpu" and torch.cuda.is_available():
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise RuntimeError(
                f"local rank {local_rank} has no GPU: this machine has {count}; use at most {count} processes "
                "per node (one per GPU)"
            )
        return "nccl", f"cuda:{local_rank}"
    if device.startswith("cuda"):
        raise RuntimeError(f"device {device} asked for, but CUDA is not available on this worker")
    return "gloo", "cpu"


def init(device: str = "auto") -> RankInfo:
    """Join the process group torchrun prepared (env://); `device` is the job's device setting."""
    global _current
    backend, rank_device = pick_backend(device)
    if rank_device.startswith("cuda"):
        torch.cuda.set_device(torch.device(rank_device))
    dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    _current = RankInfo(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        backend=backend,
        device=rank_device,
    )
    return _current


def teardown() -> None:
    global _current
    if dist.is_initialized():
        dist.destroy_process_group()
    _current = _SINGLE


def rank_device(fallback: torch.device) -> torch.device:
    """The device a loop should train on: this rank's own when distributed, else the loop's own choice."""
    return torch.device(_current.device) if _current.distributed else fallback


# ---- collectives (no-ops for one process) ------------------------------------------------------------


def barrier() -> None:
    if _current.distributed:
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The element-wise sum over ranks (in place, also returned); the tensor must be on the rank's device."""
    if _current.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_mean(values: list[float]) -> list[float]:
    """The mean of each value over ranks, so every rank acts on the same numbers."""
    if not _current.distributed:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=_current.device)
    return (all_reduce_sum(tensor) / _current.world_size).tolist()


def agree(flag: bool) -> bool:
    """True on every rank when it is true on any rank (e.g. rank 0 saw a cancel request)."""
    if not _current.distributed:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=_current.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` (picklable) on every rank: one copy sent out, where gathering would pad every rank's
    contribution to the largest (a resume state: world_size copies of it on every rank)."""
    if not _current.distributed:
        return obj
    box = [obj if _current.main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj` (picklable), in rank order, on every rank."""
    if not _current.distributed:
        return [obj]
    out: list[Any] = [None] * _current.world_size
    dist.all_gather_object(out, obj)
    return out


def wrap(model: torch.nn.Module, **kwargs: Any) -> torch.nn.Module:
    """The model in DistributedDataParallel (gradients averaged over ranks in backward); unchanged alone."""
    if not _current.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.device(_current.device).index] if _current.device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=device_ids, **kwargs)


def no_sync(model: torch.nn.Module, skip: bool) -> contextlib.AbstractContextManager[Any]:
    """DDP's `no_sync()` when `skip` (a micro-batch whose gradients are only accumulated), else nothing."""
    if skip and isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def is_peer_failure(exc: BaseException) -> bool:
    """Whether an error is a collective that broke because another rank went away (not this rank's fault)."""
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    return any(sign in text for sign in ("gloo", "NCCL", "Connection reset by peer", "Connection closed by peer"))


# ---- sharding ----------------------------------------------------------------------------------------


def shard_size(total: int, world_size: int | None = None) -> int:
    """How many indices each rank gets out of `total` (padded up, as DistributedSampler does)."""
    world = world_size or _current.world_size
    return -(-total // world)


def shard(order: torch.Tensor, rank: int | None = None, world_size: int | None = None) -> torch.Tensor:
    """This rank's part of a shuffled order that every rank computed alike: the order padded by wrapping to
    a multiple of the world size, then every world-th index from the rank's own (DistributedSampler's rule).
    The parts are disjoint when the world size divides the length, and together they cover the order."""
    world = world_size or _current.world_size
    rank = _current.rank if rank is None else rank
    if world == 1:
        return order
    padded_length = shard_size(len(order), world) * world
    if padded_length > len(order):
        repeats = -(-padded_length // len(order))
        order = torch.cat([order] * repeats)[:padded_length]
    return order[rank:padded_length:world]


class ShardRecord:
    """The sample indices one rank trained on in its first pass over the data (capped), so a job can show
    that each rank saw its own part."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.indices: list[int] = []

    def add(self, indices: torch.Tensor | list[int]) -> None:
        values = indices.tolist() if isinstance(indices, torch.Tensor) else list(indices)
        room = self.limit - len(self.indices)
        if room > 0:
            self.indices.extend(int(v) for v in values[:room])

    def gathered(self) -> list[dict[str, Any]]:
        """Every rank's record (collective: all ranks call it at the same point)."""
        mine = {"rank": _current.rank, "host": socket.gethostname(), "indices": self.indices}
        return gather_objects(mine)


# ---- reporting ---------------------------------------------------------------------------------------


class RankReporter:
    """Wraps a rank's reporter: rank 0 reports and logs, the other ranks stay silent; `should_cancel` is a
    collective, so all ranks stop at the same step when rank 0 sees a cancel request. Loops call it once
    per step at the same point on every rank."""

    def __init__(self, inner: Any):
        self.inner = inner

    def report_step(self, step: int, total: int, **metrics: float) -> None:
        if is_main():
            self.inner.report_step(step, total, **metrics)

    def report_epoch(self, epoch: int, *, step: int, **metrics: float) -> None:
        if is_main():
            self.inner.report_epoch(epoch, step=step, **metrics)

    def log(self, line: str) -> None:
        if is_main():
            self.inner.log(line)

    def resumed(self, *, step: int) -> None:
        if is_main():
            self.inner.resumed(step=step)

    def should_cancel(self) -> bool:
        return agree(is_main() and self.inner.should_cancel())

    def flush(self) -> None:
        if is_main() and hasattr(self.inner, "flush"):
            self.inner.flush()


SHARDS_FILE = "shards.json"


def shards_report(shards: list[dict[str, Any]], out_dir: Any, reporter: Any) -> dict[str, Any]:
    """Rank 0 keeps each rank's sample indices in `out_dir/shards.json` and logs a line per rank; returns
    the summary a job's metrics carry (world size, backend, first-pass samples per rank)."""
    info = current()
    if info.main:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / SHARDS_FILE).write_text(json.dumps({"world_size": info.world_size, "ranks": shards}))
        for shard_info in shards:
            reporter.log(
                f"rank {shard_info['rank']} on {shard_info['host']}: {len(shard_info['indices'])} samples in its "
                f"first pass ({len(set(shard_info['indices']))} distinct)"
            )
    return {
        "world_size": info.world_size,
        "backend": info.backend,
        "first_pass_samples_per_rank": [len(s["indices"]) for s in shards],
        "shards_file": SHARDS_FILE,
    }
