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
of them.

Uncertainty alone picks the frames the model is already torn about, which at first (a weak model) are
few kinds of scene and, later, the ambiguous ones next to the decision boundary (in PickCube: the arm
just settling at the goal), each teaching little. So a share of the queue (`explore_share`, default
`EXPLORE_SHARE`) is coverage picks instead, interleaved with the value picks (with `explore_share` 0.5
every other item). Given each frame's embedding (the model's features before its head), `coverage`
"typical" (the default) clusters the labeled and unlabeled frames (k-means, as many clusters as labeled
frames plus coverage picks) and takes, largest group first, the most typical frame (nearest its
centre) of each group that holds no labeled frame (once none is left, the turns go to value picks);
"farthest" (k-center greedy) takes the frame farthest from every labeled and queued frame, which tends
to pick outliers. Without embeddings the coverage picks are a seeded random draw. Each ranked item says
why it was chosen.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

NEIGHBOUR_STEPS = 3  # frames this close in one episode are near-duplicates (0.15 s at ManiSkill's 20 Hz)
EXPLORE_SHARE = 0.5  # share of the queue chosen for coverage rather than value
COVERAGE_KINDS = ("typical", "farthest")
KMEANS_DIMENSIONS = 32  # embeddings are projected on their main axes before clustering (cheaper)


@dataclass(frozen=True)
class Candidate:
    episode: str
    step: int
    probability: float
    other_probability: float | None = None
    env_success: bool | None = None
    features: np.ndarray | None = field(default=None, compare=False, repr=False)  # the model's embedding


@dataclass
class Ranked:
    candidate: Candidate
    value: float
    score: float  # value after the per-episode spread
    reasons: list[str] = field(default_factory=list)


SURE_PREFIX = "the model is sure"  # the reason of a value pick with nothing better to say


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
        reasons.append(f"{SURE_PREFIX} (p={p:.2f}); no unlabeled frame is less sure")
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


def unit_rows(features: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (distances then compare directions, whatever the features' scale)."""
    features = np.asarray(features, dtype=np.float64)
    return features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)


def squared_distances(points: np.ndarray, to: np.ndarray) -> np.ndarray:
    """[len(points), len(to)]: each row of `points`' squared distance to each row of `to`."""
    return (points**2).sum(1)[:, None] - 2 * points @ to.T + (to**2).sum(1)[None, :]


def nearest_distances(points: np.ndarray, to: np.ndarray | None) -> np.ndarray:
    """Each row of `points`' distance to the nearest row of `to` (infinity when `to` is empty)."""
    nearest = np.full(len(points), np.inf)
    if to is None or not len(to):
        return nearest
    for start in range(0, len(to), 512):
        block = to[start : start + 512]
        squared = squared_distances(points, block)
        nearest = np.minimum(nearest, np.sqrt(np.maximum(squared, 0.0)).min(axis=1))
    return nearest


def principal_axes(points: np.ndarray, dimensions: int) -> np.ndarray:
    """`points` projected on their `dimensions` main axes (unchanged when they have no more columns)."""
    if points.shape[1] <= dimensions:
        return points
    centred = points - points.mean(axis=0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    return centred @ axes[:dimensions].T


def kmeans(points: np.ndarray, k: int, rng: np.random.Generator, iterations: int = 10) -> np.ndarray:
    """Each row's cluster (k-means++ start, then `iterations` Lloyd steps).

    Written here rather than taken from SciPy (installed with mani-skill): `scipy.cluster.vq.kmeans2(...,
    minit="++")` measures every point against every centre chosen so far at each pick, quadratic in k, where
    this start keeps each point's nearest distance. With k = labeled frames + queue length that matters:
    20,000 points of 32 dimensions, k = 600: 2.2 s here against 28 s; k = 2,000: 6.1 s against 306 s
    (SciPy 1.17.1, 2-core development machine). scikit-learn is not a dependency."""
    centres = [points[rng.integers(len(points))]]
    nearest = ((points - centres[0]) ** 2).sum(1)
    for _ in range(1, k):
        total = nearest.sum()
        pick = rng.choice(len(points), p=nearest / total) if total > 0 else rng.integers(len(points))
        centres.append(points[pick])
        nearest = np.minimum(nearest, ((points - points[pick]) ** 2).sum(1))
    centre = np.stack(centres)
    for _ in range(iterations):
        assigned = squared_distances(points, centre).argmin(axis=1)
        for c in np.unique(assigned):
            centre[c] = points[assigned == c].mean(axis=0)
    return squared_distances(points, centre).argmin(axis=1)


def typical_picks(points: np.ndarray, labeled: np.ndarray | None, count: int, seed: int) -> list[tuple[int, int]]:
    """(row of `points`, size of its group) for up to `count` groups with no labeled frame, largest first:
    the labeled and unlabeled frames clustered together into labeled + `count` groups, and from each
    such group the frame nearest its centre."""
    known = labeled if labeled is not None else np.zeros((0, points.shape[1]))
    together = principal_axes(np.concatenate([known, points]), KMEANS_DIMENSIONS)
    groups = kmeans(together, min(len(together), len(known) + count), np.random.default_rng(seed))
    covered = set(groups[: len(known)].tolist())
    ours, projected = groups[len(known) :], together[len(known) :]
    picks = []
    for group in sorted(set(ours.tolist()) - covered, key=lambda g: (-int(np.sum(groups == g)), g)):
        members = np.flatnonzero(ours == group)
        centre = projected[members].mean(axis=0)
        picks.append((int(members[np.argmin(((projected[members] - centre) ** 2).sum(1))]), len(members)))
    return picks[:count]


def is_coverage_turn(n: int, explore_share: float) -> bool:
    """Whether the queue's n-th item (from 0) is a coverage pick: `explore_share` of the items, evenly spread."""
    return int((n + 1) * explore_share) > int(n * explore_share)


def interleave(
    by_value: list[Ranked],
    *,
    limit: int,
    explore_share: float,
    labeled_features: np.ndarray | None,
    seed: int,
    coverage: str = "typical",
) -> list[Ranked]:
    """`limit` items: value picks in `by_value`'s order, and at the coverage turns a coverage pick (see the
    module's docstring), or a random one when there are no embeddings."""
    embedded = all(r.candidate.features is not None for r in by_value)
    points = unit_rows(np.stack([r.candidate.features for r in by_value])) if embedded else None  # type: ignore[misc]
    labeled = unit_rows(labeled_features) if points is not None and labeled_features is not None else None
    nearest = nearest_distances(points, labeled) if points is not None and coverage == "farthest" else None
    turns = sum(is_coverage_turn(n, explore_share) for n in range(min(limit, len(by_value))))
    typical = typical_picks(points, labeled, turns, seed) if points is not None and coverage == "typical" else []
    free = np.ones(len(by_value), dtype=bool)
    rng = np.random.default_rng(seed)
    chosen: list[Ranked] = []
    next_value = 0
    for n in range(min(limit, len(by_value))):
        while typical and not free[typical[0][0]]:
            typical.pop(0)
        if is_coverage_turn(n, explore_share) and (typical or points is None or nearest is not None):
            if typical:
                pick, size = typical.pop(0)
                reason = f"coverage: typical of {size} similar frames, none of them labeled"
            elif nearest is not None:
                pick = int(np.argmax(np.where(free, nearest, -1.0)))
                far = "far from every labeled frame" if np.isinf(nearest[pick]) else f"distance {nearest[pick]:.2f}"
                reason = f"coverage: least like the labeled and queued frames ({far})"
            else:
                pick = int(rng.choice(np.flatnonzero(free)))
                reason = "exploration: random pick"
            kept = [r for r in by_value[pick].reasons if not r.startswith(SURE_PREFIX)]  # chosen for coverage
            by_value[pick].reasons = [reason, *kept]
        else:
            while not free[next_value]:
                next_value += 1
            pick = next_value
        free[pick] = False
        chosen.append(by_value[pick])
        if nearest is not None and points is not None:
            nearest = np.minimum(nearest, np.linalg.norm(points - points[pick], axis=1))
    return chosen


def rank(
    candidates: Iterable[Candidate],
    *,
    limit: int = 200,
    episode_decay: float = 0.5,
    threshold: float = 0.5,
    neighbour_steps: int = NEIGHBOUR_STEPS,
    explore_share: float = EXPLORE_SHARE,
    labeled_features: np.ndarray | None = None,
    seed: int = 0,
    coverage: str = "typical",
) -> list[Ranked]:
    """The `limit` most valuable candidates, best first, spread across episodes and over each episode,
    with `explore_share` of them coverage picks instead (see the module's docstring; `labeled_features`:
    the embeddings of the frames already labeled; `seed`: the random draw used without embeddings)."""
    if not 0.0 < episode_decay <= 1.0:
        raise ValueError("episode_decay must be in (0, 1]")
    if neighbour_steps < 0:
        raise ValueError("neighbour_steps must be >= 0")
    if not 0.0 <= explore_share <= 1.0:
        raise ValueError("explore_share must be in [0, 1]")
    if coverage not in COVERAGE_KINDS:
        raise ValueError(f"coverage must be one of {COVERAGE_KINDS}")
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
    if explore_share == 0.0 or not ranked:
        return ranked[:limit]
    return interleave(
        ranked,
        limit=limit,
        explore_share=explore_share,
        labeled_features=labeled_features,
        seed=seed,
        coverage=coverage,
    )
