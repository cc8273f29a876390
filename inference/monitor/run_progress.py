"""RL runs over training, from the reward-hacking monitor's counters: per run (the client and the `stream` an
RL worker names, e.g. `reward_client.di_engine`'s `monitor_run`) and time bucket, the env's success rate and
the reward model's mean probability and success rate on the frames the run sent with an env flag. The
deployment page's RL panel draws them, so a person sees whether the policy learns the task (the env success
rises with the reward) or fools the reward (the reward rises alone)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from . import rules as monitor

MAX_RUNS = 5  # the runs with the most env-flagged frames
MAX_POINTS = 60
CHART_W, CHART_H = 320, 90  # the panel's SVG plot, in its own units


def progress_of(points: Mapping[int, Mapping[str, int]]) -> dict[str, dict]:
    """Per run: `times` (bucket starts) and, at each, `frames` (env-flagged), `env_success`, `reward`
    (the mean probability) and `judged_success` (the model's success rate on the same frames)."""
    runs: dict[str, dict] = {}
    for t, counts in sorted(points.items()):
        per_run: dict[str, dict[str, int]] = {}
        for key, value in counts.items():
            if key.startswith("r:"):
                run, _, field = key[2:].rpartition(":")
                per_run.setdefault(run, {})[field] = int(value)
        for run, c in per_run.items():
            e = c.get("e", 0)
            if not e:
                continue
            series = runs.setdefault(run, {"times": [], "frames": [], "env_success": [], "reward": [], "judged": []})
            series["times"].append(t)
            series["frames"].append(e)
            series["env_success"].append(c.get("es", 0) / e)
            series["reward"].append(c.get("pm", 0) / 1000 / e)
            series["judged"].append((c.get("es", 0) - c.get("fm", 0) + c.get("fs", 0)) / e)
    return runs


def polyline(values: list[float], width: int = CHART_W, height: int = CHART_H) -> str:
    """SVG polyline points for values in [0, 1], spread evenly across the plot (0 at the bottom)."""
    if not values:
        return ""
    step = width / max(1, len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - max(0.0, min(1.0, v)) * height:.1f}" for i, v in enumerate(values))


def panel_runs(points: Mapping[int, Mapping[str, int]]) -> list[dict]:
    """The panel's rows: the busiest runs, each with its first and last values and its two plot lines."""
    runs = progress_of(points)
    busiest = sorted(runs.items(), key=lambda item: -sum(item[1]["frames"]))[:MAX_RUNS]
    rows = []
    for name, s in sorted(busiest):
        rows.append(
            {
                "run": name,
                "frames": sum(s["frames"]),
                "points": len(s["times"]),
                "env_first": s["env_success"][0],
                "env_last": s["env_success"][-1],
                "reward_first": s["reward"][0],
                "reward_last": s["reward"][-1],
                "env_line": polyline(s["env_success"]),
                "reward_line": polyline(s["reward"]),
            }
        )
    return rows


def run_progress_points(ref: str, *, hours: float, now: float) -> dict[int, Counter]:
    """The deployment's counters per time bucket over the last `hours`, merged into at most MAX_POINTS points
    spread over the span that has data (a run of minutes keeps its 10 s buckets)."""
    from ..serving import sync_redis
    from .services import _key

    redis = sync_redis()
    buckets = [int(b) for b in redis.zrangebyscore(_key("idx", ref), now - hours * 3600, "+inf")]
    pipe = redis.pipeline(transaction=False)
    for b in buckets:
        pipe.hgetall(_key("b", ref, b))
    raw = pipe.execute()
    extent = buckets[-1] - buckets[0] if buckets else 0
    span = max(monitor.BUCKET_S, extent // MAX_POINTS // monitor.BUCKET_S * monitor.BUCKET_S)
    grouped: dict[int, list] = {}
    for b, counts in zip(buckets, raw, strict=True):
        grouped.setdefault(b // span * span, []).append(counts)
    return {t: monitor.merge(c) for t, c in sorted(grouped.items())}
