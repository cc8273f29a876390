"""Dynamic batching: gather concurrent requests, run one forward pass, split the results. No Django.

`Batcher.collect` takes the request that woke the worker, drains whatever else is already queued, and
then waits for more up to `max_wait_ms` while the batch holds fewer than `max_batch_size` items (as
Triton's max queue delay does). With `adaptive` on, the wait only happens when other clients are seen:
more than one request was queued at once now, or in one of the last `recent` batches. A lone client
sending one request at a time never pays the wait, while concurrent clients fill batches (a batch that
came apart, e.g. when some clients were slower to send again, is waited for until it is whole again).

A batch is bounded in bytes as well as items: `max_pixels` (INFERENCE_BATCH_MAX_PIXELS) caps the uint8
RGB pixels (bytes / 3) of the requests in one batch; a request that does not fit is left for the next
batch (`collect` returns it apart), and a request larger than the cap alone is a batch of its own.

`score_requests` scores the requests' arrays (grouped by item shape) in chunks of at most `max_batch_size`
items and `max_pixels` pixels, concatenating only a chunk at a time, and hands each request its own slice
of the results.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int = 64
    max_wait_ms: float = 2.0

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        if self.max_wait_ms < 0:
            raise ValueError("max_wait_ms cannot be negative")


class Source(Protocol[T]):
    def pop_now(self, max_count: int) -> list[T]:
        """Up to max_count queued items without waiting."""

    def pop_wait(self, timeout_s: float) -> T | None:
        """The next item, waiting at most timeout_s (a few ms); None if none came."""


@dataclass
class Batcher:
    policy: BatchPolicy
    size: Callable[[Any], int] = lambda item: 1
    pixels: Callable[[Any], int] = lambda item: 0
    max_pixels: int = 0  # 0: no pixel cap
    adaptive: bool = True
    clock: Callable[[], float] = time.monotonic
    recent: int = 4  # batches whose request counts tell whether other clients are sending
    _counts: deque[int] = field(init=False)

    def __post_init__(self) -> None:
        self._counts = deque(maxlen=self.recent)

    def others_seen(self, queued: int) -> bool:
        """Whether other clients are sending: `queued` requests were waiting together now, or recently."""
        return queued > 1 or any(count > 1 for count in self._counts)

    def collect(self, first: T, source: Source[T], already: Sequence[T] = (), drained: bool = False) -> list[T]:
        """`first` woke us (with `already`, popped in the same call); add what else comes.

        `drained`: the queue was just seen empty, so there is nothing to take without waiting."""
        return self.collect_within(first, source, already, drained)[0]

    def collect_within(
        self, first: T, source: Source[T], already: Sequence[T] = (), drained: bool = False
    ) -> tuple[list[T], list[T]]:
        """`collect`, bounded by `max_pixels` too: (the batch, the requests taken that did not fit it,
        oldest first, for the caller to put back)."""
        batch: list[T] = [first]
        over: list[T] = []
        total, pixels = self.size(first), self.pixels(first)
        limit = self.policy.max_batch_size

        def add(items: Sequence[T]) -> None:
            nonlocal total, pixels
            for item in items:
                cost = self.pixels(item)
                if over or (self.max_pixels and pixels + cost > self.max_pixels):
                    over.append(item)
                else:
                    batch.append(item)
                    total += self.size(item)
                    pixels += cost

        add(already)
        started = self.clock()
        look = not drained  # whether the queue may hold more right now
        while total < limit and not over:
            if look:
                more = source.pop_now(limit - total)
                if more:
                    add(more)
                    continue
            look = True
            # decided only now, when the queue has been seen: requests waiting together count as other clients
            wait = self.policy.max_wait_ms / 1000.0 if not self.adaptive or self.others_seen(len(batch)) else 0.0
            remaining = started + wait - self.clock()
            if remaining <= 0:
                break
            item = source.pop_wait(remaining)
            if item is None:
                break
            add([item])
        self._counts.append(len(batch) + len(over))
        return batch, over


def score_requests(
    arrays: Sequence[np.ndarray],
    score: Callable[[np.ndarray], Sequence[Any]],
    max_batch_size: int,
    max_pixels: int = 0,
) -> list[list[Any]]:
    """Results per request, from as few `score` calls as the shapes, max_batch_size and max_pixels allow
    (a chunk holds at least one item)."""
    results: list[list[Any]] = [[] for _ in arrays]
    groups: dict[tuple, list[int]] = {}
    for index, array in enumerate(arrays):
        groups.setdefault((array.dtype.str, array.shape[1:]), []).append(index)
    for indices in groups.values():
        sample = arrays[indices[0]]
        item_pixels = max(1, int(np.prod(sample.shape[1:], dtype=np.int64)) // 3)
        per_chunk = max_batch_size if not max_pixels else max(1, min(max_batch_size, max_pixels // item_pixels))
        pending: list[np.ndarray] = []  # pieces of the chunk being filled (views, not copies)
        owners: list[tuple[int, int]] = []  # (request, items) of each piece
        filled = 0
        for i in indices:
            piece = arrays[i]
            while len(piece):
                take = piece[: per_chunk - filled]
                pending.append(take)
                owners.append((i, len(take)))
                filled += len(take)
                piece = piece[len(take) :]
                if filled == per_chunk:
                    _score_chunk(pending, owners, score, results)
                    pending, owners, filled = [], [], 0
        if pending:
            _score_chunk(pending, owners, score, results)
    return results


def _score_chunk(
    pieces: list[np.ndarray], owners: list[tuple[int, int]], score: Callable, results: list[list[Any]]
) -> None:
    chunk = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    scores = list(score(chunk))
    if len(scores) != len(chunk):
        raise RuntimeError(f"scorer returned {len(scores)} results for {len(chunk)} items")
    offset = 0
    for i, n in owners:
        results[i].extend(scores[offset : offset + n])
        offset += n
