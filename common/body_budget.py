"""Bytes of request bodies a web process holds at once (no Django).

A reward request's `.npy` body is read whole into memory and kept until its answer is sent; 16 concurrent
151 MB bodies grew the web process by 4.4 GiB. `BodyBudget` bounds what one process holds: a request takes
its declared `Content-Length` (or its bytes as they arrive, when it declares none) before the body is kept,
and gives it back when its answer is sent. A request that would take the process past the budget while
others hold bytes is refused with a busy 503 (`Retry-After`, which reward_client retries); its body is read
and dropped chunk by chunk, so the client gets the answer rather than a reset connection. A request alone may
take any size (the body limits bound it), so no valid body is refused for ever.

The web process runs one event loop: the counter needs no lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from common.asgi_http import HttpError

RETRY_AFTER_S = 1


@dataclass
class BodyBudget:
    limit: int
    setting: str
    held: int = 0  # bytes every request of this process holds now
    peak: int = 0
    refused: int = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[BodyHold]:
        """A request's share, given back when the block ends (answered, refused or failed)."""
        hold = BodyHold(self)
        try:
            yield hold
        finally:
            self.held -= hold.nbytes
            hold.nbytes = 0


@dataclass
class BodyHold:
    budget: BodyBudget
    nbytes: int = 0

    def grow_to(self, nbytes: int) -> None:
        """Hold `nbytes` in all (no-op when this hold has that much); a busy HttpError 503 past the budget."""
        extra = nbytes - self.nbytes
        if extra <= 0:
            return
        budget = self.budget
        others = budget.held - self.nbytes
        if others > 0 and budget.held + extra > budget.limit:
            budget.refused += 1
            raise HttpError(
                503,
                f"this web process holds {others} bytes of request bodies; with this one's {nbytes} that passes "
                f"its budget of {budget.limit} bytes ({budget.setting}): retry shortly",
                RETRY_AFTER_S,
            )
        budget.held += extra
        self.nbytes = nbytes
        budget.peak = max(budget.peak, budget.held)
