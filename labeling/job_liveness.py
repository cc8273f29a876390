"""Jobs that survive their workers, for every job kind (imports, proposal jobs, training jobs):

- `Heartbeat`: while a job runs, a thread writes the time into its row every few seconds, also while the
  job's own work is silent for minutes; it stops with the process, so a killed worker's job goes stale.
- `stale_sweep`: the beat sweep's rule, one for all kinds: a running row whose heartbeat is older than the
  kind's limit is requeued, or failed with the reason once it has lost `max_attempts` runs. Each move is a
  guarded update on the row as the sweep saw it (same attempt, still stale), so a run that wrote meanwhile
  keeps its job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Model, QuerySet
from django.utils import timezone

logger = logging.getLogger(__name__)


class Heartbeat:
    """`with Heartbeat(ImportJob, pk, status="running", attempt=n, field="updated_at", interval=20):` keeps
    the row's `field` fresh while the block runs (only while the row is still in `status` and `attempt`)."""

    def __init__(
        self,
        model: type[Model],
        pk: int,
        *,
        status: str,
        attempt: int | None,
        field: str,
        interval: float,
    ):
        self.rows = model._default_manager.filter(pk=pk, status=status)
        if attempt is not None:
            self.rows = self.rows.filter(attempt=attempt)
        self.field = field
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{model.__name__}-{pk}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.rows.update(**{self.field: timezone.now()})
        except Exception:
            logger.exception("heartbeat of %s stopped", self._thread.name)
        finally:
            connection.close()


@dataclass
class Sweep:
    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def stale_sweep(
    stale: QuerySet,
    *,
    max_attempts: int,
    requeue: Callable[[QuerySet, int, int], bool],
    fail: Callable[[QuerySet, int, int], bool],
) -> Sweep:
    """Requeue or fail each row of `stale` (running rows whose heartbeat is too old; they have `attempt`):
    `fail(rows, pk, attempt)` once `attempt` reached `max_attempts`, else `requeue(rows, pk, attempt)`, where
    `rows` is that one row while it is still as the sweep saw it; each returns whether it moved the row."""
    outcome = Sweep()
    for pk, attempt in list(stale.values_list("pk", "attempt")):
        mine = stale.filter(pk=pk, attempt=attempt)
        if attempt >= max_attempts:
            if fail(mine, pk, attempt):
                outcome.failed.append(pk)
        elif requeue(mine, pk, attempt):
            outcome.requeued.append(pk)
    return outcome
