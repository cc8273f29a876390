"""Ranking unlabeled frames by how much a label would help the model (active learning). No Django.

Each candidate frame has the current model's success probability, optionally a second model's
probability (the previous checkpoint) and the env's own success flag. Its value is
- uncertainty: `1 - |2p - 1|` (1 at p = 0.5, 0 at p = 0 or 1);
- plus 1 when the model and the env's success flag disagree (`p > 0.5` vs the flag);
- plus `|p - p_other|` when two models are known (they disagree on it).
The queue is spread across episodes: an episode's k-th best frame counts `episode_decay ** k` of its
value, so one confusing episode does not fill the queue. Within an episode it is spread over time too:
neighbouring frames (within `neighbour_steps` steps) show nearly the same scene, so an episode's frames
are taken best first among those not next to one already taken, and the near-duplicates come after all
of them. Each ranked item says why it was chosen.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

NEIGHBOUR_STEPS = 3  # frames this close in one episode are near-duplicates (0.15 s at ManiSkill's 20 Hz)


@dataclass(frozen=True)
class Candidate:
    episode: str
    step: int
    probability: float
    other_probability: float | None = None
    env_success: bool | None = None


@dataclass
class Ranked:
    candidate: Candidate
    value: float
    score: float  # value after the per-episode spread
    reasons: list[str] = field(default_factory=list)


def value_of(c: Candidate, threshold: float = 0.5) -> tuple[float, list[str]]:
    p = float(c.probability)
    uncertainty = 1.0 - abs(2.0 * p - 1.0)
    value, reasons = uncertainty, []
    if uncertainty >= 0.5:
        reasons.append(f"uncertain (p={p:.2f})")
    if c.env_success is not None and (p > threshold) != bool(c.env_success):
        value += 1.0
        said = "success" if p > threshold else "fail"
        reasons.append(f"model says {said} (p={p:.2f}), env says {'success' if c.env_success else 'fail'}")
    if c.other_probability is not None:
        gap = abs(p - float(c.other_probability))
        value += gap
        if gap >= 0.3:
            reasons.append(f"models disagree ({p:.2f} vs {float(c.other_probability):.2f})")
    if not reasons:
        reasons.append(f"most uncertain left (p={p:.2f})")
    return value, reasons


def spread_in_time(items: list[Ranked], neighbour_steps: int) -> list[Ranked]:
    """One episode's items, best first, except that an item within `neighbour_steps` steps of one taken
    before it waits until no item far from every taken one is left (the waiting ones then follow in
    value order)."""
    ordered = sorted(items, key=lambda r: (-r.value, r.candidate.step))
    if neighbour_steps <= 0:
        return ordered
    taken: list[Ranked] = []
    waiting: list[Ranked] = []
    for item in ordered:
        step = item.candidate.step
        if any(abs(step - t.candidate.step) <= neighbour_steps for t in taken):
            waiting.append(item)
        else:
            taken.append(item)
    return taken + waiting


def rank(
    candidates: Iterable[Candidate],
    *,
    limit: int = 200,
    episode_decay: float = 0.5,
    threshold: float = 0.5,
    neighbour_steps: int = NEIGHBOUR_STEPS,
) -> list[Ranked]:
    """The `limit` most valuable candidates, best first, spread across episodes and over each episode."""
    if not 0.0 < episode_decay <= 1.0:
        raise ValueError("episode_decay must be in (0, 1]")
    if neighbour_steps < 0:
        raise ValueError("neighbour_steps must be >= 0")
    by_episode: dict[str, list[Ranked]] = defaultdict(list)
    for c in candidates:
        value, reasons = value_of(c, threshold)
        by_episode[c.episode].append(Ranked(c, value, value, reasons))
    ranked: list[Ranked] = []
    for items in by_episode.values():
        for k, item in enumerate(spread_in_time(items, neighbour_steps)):
            item.score = item.value * episode_decay**k
            ranked.append(item)
    ranked.sort(key=lambda r: (-r.score, r.candidate.episode, r.candidate.step))
    return ranked[:limit]
