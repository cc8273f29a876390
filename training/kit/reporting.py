"""How a training loop reports progress, with no Django: the Reporter protocol and an in-memory one.

Runners call `report_step` after each optimisation step, `report_epoch` after each validation, `log`
for lines worth keeping, `should_cancel()` between batches (raising JobCancelled when it is true) and
`resumed(step=...)` when they go on from a resume checkpoint (training.kit.resume).
The job's reporter (training.jobs.reporter.JobReporter) persists the points and pushes them live.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class JobCancelled(Exception):
    """Raised by a runner when its job was cancelled; the job ends as cancelled, not failed."""


class Reporter(Protocol):
    def report_step(self, step: int, total: int, **metrics: float) -> None: ...

    def report_epoch(self, epoch: int, *, step: int, **metrics: float) -> None: ...

    def log(self, line: str) -> None: ...

    def should_cancel(self) -> bool: ...

    def resumed(self, *, step: int) -> None:
        """Training goes on from a checkpoint taken after `step`: points reported after it are void."""
        ...


class Eta:
    """Progress (0..1) and seconds left from steps done so far, measured from the first report."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start: float | None = None
        self._start_step = 0

    def update(self, step: int, total: int) -> tuple[float, float | None]:
        now = self._clock()
        if self._start is None:
            self._start, self._start_step = now, step
        progress = min(1.0, max(0.0, step / total)) if total > 0 else 0.0
        done = step - self._start_step
        if done <= 0 or total <= 0:
            return progress, None
        per_step = (now - self._start) / done
        return progress, max(0.0, per_step * (total - step))


@dataclass
class MemoryReporter:
    """Keeps everything in lists: for tests, benchmarks and inline runs without a job row."""

    cancel_after_steps: int | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    echo: bool = False
    resumed_at: int | None = None

    def report_step(self, step: int, total: int, **metrics: float) -> None:
        self.steps.append({"step": step, "total": total, **metrics})

    def report_epoch(self, epoch: int, *, step: int, **metrics: float) -> None:
        self.epochs.append({"epoch": epoch, "step": step, **metrics})
        if self.echo:
            print(f"epoch {epoch}: " + " ".join(f"{k}={v:.4f}" for k, v in metrics.items()), flush=True)

    def log(self, line: str) -> None:
        self.lines.append(line)
        if self.echo:
            print(line, flush=True)

    def resumed(self, *, step: int) -> None:
        self.steps = [p for p in self.steps if p["step"] <= step]
        self.epochs = [p for p in self.epochs if p["step"] <= step]
        self.resumed_at = step

    def should_cancel(self) -> bool:
        return self.cancel_after_steps is not None and len(self.steps) >= self.cancel_after_steps
