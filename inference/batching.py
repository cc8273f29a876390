"""Dynamic batching: gather concurrent requests, run one forward pass, split the results. No Django.

`Batcher.collect` takes the request that woke the worker, drains whatever else is already queued, and
then waits for more up to `max_wait_ms` while the batch holds fewer than `max_batch_size` items (as
Triton's max queue delay does). With `adaptive` on, the wait only happens when other clients are seen:
more than one request was queued at once now, or in one of the last `recent` batches. A lone client
sending one request at a time never pays the wait, while concurrent clients fill batches (a batch that
came apart, e.g. when some clients were slower to send again, is waited for until it is whole again).

`score_requests` concatenates the requests' arrays (grouped by item shape), scores them in chunks of at
most `max_batch_size` items, and hands each request its own slice of the results.
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
        batch = [first, *already]
        total = sum(self.size(item) for item in batch)
        limit = self.policy.max_batch_size
        started = self.clock()
        look = not drained  # whether the queue may hold more right now
        while total < limit:
            if look:
                more = source.pop_now(limit - total)
                if more:
                    batch.extend(more)
                    total += sum(self.size(item) for item in more)
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
            batch.append(item)
            total += self.size(item)
        self._counts.append(len(batch))
        return batch


def score_requests(
    arrays: Sequence[np.ndarray], score: Callable[[np.ndarray], Sequence[Any]], max_batch_size: int
) -> list[list[Any]]:
    """Results per request, from as few `score` calls as the shapes and max_batch_size allow."""
    results: list[list[Any]] = [[] for _ in arrays]
    groups: dict[tuple, list[int]] = {}
    for index, array in enumerate(arrays):
        groups.setdefault((array.dtype.str, array.shape[1:]), []).append(index)
    for indices in groups.values():
        stacked = arrays[indices[0]] if len(indices) == 1 else np.concatenate([arrays[i] for i in indices])
        scores: list[Any] = []
        for start in range(0, len(stacked), max_batch_size):
            chunk_scores = list(score(stacked[start : start + max_batch_size]))
            if len(chunk_scores) != len(stacked[start : start + max_batch_size]):
                raise RuntimeError(
                    f"scorer returned {len(chunk_scores)} results for {len(stacked[start : start + max_batch_size])} items"
                )
            scores.extend(chunk_scores)
        offset = 0
        for i in indices:
            n = len(arrays[i])
            results[i] = scores[offset : offset + n]
            offset += n
    return results
