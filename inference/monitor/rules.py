"""Reward-hacking monitor, the plain logic (no Django, no Redis): what one served batch adds to the
counters, how counters become rates, and when a rate held above its threshold long enough to alarm.

An RL worker may send, with each rewards request, the env's own success flag per frame and the id of
the episode each frame belongs to. Every served batch then adds to counters per time bucket:
- `n` scored frames, `ms` of them judged success by the model, `h<i>` a probability histogram;
- `e` frames with an env flag, `es` env successes, `fs` false successes (model success, env fail) and
  `fm` false fails (model fail, env success); the same four per RL run as `r:<run>:<field>`, with `r:<run>:pm`
  the sum of the run's probabilities in thousandths;
and per episode step (whole deployment life): `n:<step>`, `ms:<step>`, `e:<step>`, `es:<step>`.

The false-success rate is `fs / e` over the monitor's window; an alarm is raised once that rate stayed
above the threshold for `hold_s` seconds with at least `min_items` env-flagged frames in the window.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

BUCKET_S = 10  # seconds per time bucket of counters
HIST_BINS = 20  # probability histogram bins over [0, 1]
MAX_STEP = 1000  # steps at or past this share the last step bucket
MAX_RUN_CHARS = 100
MAX_EPISODE_CHARS = 100


@dataclass(frozen=True)
class MonitorSettings:
    enabled: bool = True
    false_success_threshold: float = 0.3
    hold_s: float = 600.0
    window_s: float = 60.0
    min_items: int = 20

    def __post_init__(self) -> None:
        if not 0.0 <= self.false_success_threshold <= 1.0:
            raise ValueError("false_success_threshold must be between 0 and 1")
        if self.hold_s < 0 or self.window_s <= 0:
            raise ValueError("hold_s must be at least 0 and window_s above 0")
        if self.min_items < 1:
            raise ValueError("min_items must be at least 1")


def bucket_of(ts: float, bucket_s: int = BUCKET_S) -> int:
    """Start (epoch seconds) of the bucket holding time `ts`."""
    return int(ts // bucket_s) * bucket_s


def hist_bin(probability: float) -> int:
    return min(HIST_BINS - 1, max(0, int(probability * HIST_BINS)))


def tally(
    probabilities: Sequence[float | None],
    threshold: float,
    *,
    env_success: Sequence[bool] | None = None,
    run: str = "",
) -> Counter:
    """Bucket counter increments for one served batch (unscored items count nowhere)."""
    counts: Counter = Counter()
    run = run[:MAX_RUN_CHARS]
    for i, p in enumerate(probabilities):
        if p is None or not math.isfinite(p):
            continue
        judged = p > threshold
        counts["n"] += 1
        counts["ms"] += judged
        counts[f"h{hist_bin(p)}"] += 1
        if env_success is None:
            continue
        env = bool(env_success[i])
        fields = {"e": 1, "es": env, "fs": judged and not env, "fm": env and not judged}
        for name, value in fields.items():
            counts[name] += value
            counts[f"r:{run}:{name}"] += value
        counts[f"r:{run}:pm"] += round(p * 1000)  # the run's probabilities, in thousandths (its RL panel)
    return +counts  # drop zeros


def step_tally(
    probabilities: Sequence[float | None],
    threshold: float,
    steps: Sequence[int | None],
    env_success: Sequence[bool] | None = None,
) -> Counter:
    """Per-episode-step increments: `steps[i]` is the frame's step in its episode (None: unknown)."""
    counts: Counter = Counter()
    for i, (p, step) in enumerate(zip(probabilities, steps, strict=True)):
        if p is None or step is None or not math.isfinite(p):
            continue
        s = min(int(step), MAX_STEP)
        counts[f"n:{s}"] += 1
        counts[f"ms:{s}"] += p > threshold
        if env_success is not None:
            counts[f"e:{s}"] += 1
            counts[f"es:{s}"] += bool(env_success[i])
    return +counts


def disagreements(
    probabilities: Sequence[float | None], threshold: float, env_success: Sequence[bool] | None
) -> list[int]:
    """Indexes where the model and the env disagree (model success with env fail, or the reverse)."""
    if env_success is None:
        return []
    return [
        i
        for i, p in enumerate(probabilities)
        if p is not None and math.isfinite(p) and (p > threshold) != bool(env_success[i])
    ]


def _int_map(raw: Mapping) -> dict[str, int]:
    return {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}


def merge(buckets: Iterable[Mapping]) -> Counter:
    total: Counter = Counter()
    for bucket in buckets:
        total.update(_int_map(bucket))
    return total


def rate(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def window_rates(counts: Mapping[str, int]) -> dict:
    """False-success and false-fail rates of merged counters (None without env-flagged frames)."""
    e = int(counts.get("e", 0))
    return {
        "frames": int(counts.get("n", 0)),
        "env_flagged": e,
        "false_success_rate": rate(int(counts.get("fs", 0)), e),
        "false_fail_rate": rate(int(counts.get("fm", 0)), e),
        "model_success_rate": rate(int(counts.get("ms", 0)), int(counts.get("n", 0))),
    }


def runs_of(counts: Mapping[str, int]) -> dict[str, dict]:
    """Per RL run counters and rates out of merged counters."""
    runs: dict[str, Counter] = {}
    for key, value in counts.items():
        if key.startswith("r:"):
            run, _, field = key[2:].rpartition(":")
            runs.setdefault(run, Counter())[field] += int(value)
    return {run: window_rates(c) for run, c in sorted(runs.items())}


def histogram(counts: Mapping[str, int]) -> list[int]:
    return [int(counts.get(f"h{i}", 0)) for i in range(HIST_BINS)]


def histogram_of(probabilities: Iterable[float]) -> list[int]:
    bins = [0] * HIST_BINS
    for p in probabilities:
        if math.isfinite(p):
            bins[hist_bin(p)] += 1
    return bins


def steps_series(raw: Mapping) -> dict:
    """Per step: frames, model success rate and env success rate (None where unknown), steps ascending."""
    counts = _int_map(raw)
    steps = sorted({int(k.split(":", 1)[1]) for k in counts if k.startswith("n:")})
    return {
        "steps": steps,
        "frames": [counts.get(f"n:{s}", 0) for s in steps],
        "model_success_rate": [rate(counts.get(f"ms:{s}", 0), counts.get(f"n:{s}", 0)) for s in steps],
        "env_success_rate": [rate(counts.get(f"es:{s}", 0), counts.get(f"e:{s}", 0)) for s in steps],
    }


@dataclass(frozen=True)
class AlarmDecision:
    above_since: float | None  # when the rate went above the threshold (None: it is not above)
    raise_alarm: bool
    false_success_rate: float | None


def alarm_decide(
    counts: Mapping[str, int], settings: MonitorSettings, *, now: float, above_since: float | None
) -> AlarmDecision:
    """Advance the alarm state with the window's counters. Too few env-flagged frames keep the state."""
    rates = window_rates(counts)
    fsr = rates["false_success_rate"]
    if not settings.enabled or fsr is None or rates["env_flagged"] < settings.min_items:
        return AlarmDecision(above_since, False, fsr)
    if fsr <= settings.false_success_threshold:
        return AlarmDecision(None, False, fsr)
    since = above_since if above_since is not None else now
    return AlarmDecision(since, now - since >= settings.hold_s, fsr)
