"""Counters, rolling statistics and warning throttling of one live teleop stream. No Django, no sockets.

The agent consumer feeds it what happens (a step received, a frame dropped or bad, an inference done) and
asks it for the status viewers see, for the counts not yet saved to the session, and whether a warning may
be sent again (the same text at most once per WARN_EVERY_S seconds).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

WINDOW = 50  # received-step times and inference latencies kept for the rolling figures
IDLE_S = 2.0  # no step for this long: the rate reads 0
WARN_EVERY_S = 5.0


@dataclass(frozen=True)
class CountDelta:
    """Counts since the last `take_delta`, to add to the session's stored totals."""

    steps: int
    inferred: int
    dropped: int


def _percentile(values: deque[float], q: float) -> float | None:
    return float(np.percentile(list(values), q)) if values else None


class StreamStats:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.steps = 0
        self.inferred = 0
        self.dropped = 0
        self.bad_frames = 0
        self.last_probability: float | None = None
        self._received: deque[float] = deque(maxlen=WINDOW)
        self._inference_ms: deque[float] = deque(maxlen=WINDOW)
        self._saved = CountDelta(0, 0, 0)
        self._warned: dict[str, float] = {}

    def step_received(self) -> None:
        self.steps += 1
        self._received.append(self.clock())

    def frame_dropped(self) -> None:
        self.dropped += 1

    def bad_frame(self) -> None:
        self.bad_frames += 1

    def scored(self, *, inference_ms: float, probability: float) -> None:
        self.inferred += 1
        self._inference_ms.append(inference_ms)
        self.last_probability = probability

    def rate_hz(self) -> float:
        """Steps per second over the last WINDOW steps; 0 once the stream has been idle for IDLE_S."""
        times = self._received
        if len(times) < 2 or times[-1] <= times[0] or self.clock() - times[-1] > IDLE_S:
            return 0.0
        return (len(times) - 1) / (times[-1] - times[0])

    def status(self) -> dict:
        return {
            "steps": self.steps,
            "rate_hz": round(self.rate_hz(), 2),
            "inferred": self.inferred,
            "dropped": self.dropped,
            "bad_frames": self.bad_frames,
            "inference_ms_p50": _percentile(self._inference_ms, 50),
            "inference_ms_p95": _percentile(self._inference_ms, 95),
            "last_probability": self.last_probability,
        }

    def take_delta(self) -> CountDelta:
        """The counts since the previous call (the first call: since the start)."""
        now = CountDelta(self.steps, self.inferred, self.dropped)
        delta = CountDelta(
            now.steps - self._saved.steps, now.inferred - self._saved.inferred, now.dropped - self._saved.dropped
        )
        self._saved = now
        return delta

    def may_warn(self, message: str) -> bool:
        """True (and noted) unless the same message was allowed within the last WARN_EVERY_S seconds."""
        now = self.clock()
        if now - self._warned.get(message, -1e9) < WARN_EVERY_S:
            return False
        if len(self._warned) >= 1000:  # messages name steps and episodes: keep the memo bounded
            self._warned.clear()
        self._warned[message] = now
        return True
