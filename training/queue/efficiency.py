"""Measured label efficiency of a project: bench/active.py's result (ranked queue vs random order) stored
per project and read back for the evaluation page's chart. No training here; the bench measures."""

from __future__ import annotations

from projects.models import Project

from ..models import LabelEfficiency
from ..page_data import LabelEfficiencyData, LabelEfficiencyRun

ORDERS = ("ranked", "random")
MAX_RUNS = 50
MAX_POINTS = 500


def measure_command(project: Project) -> str:
    return f'.venv/bin/python bench/active.py --project "{project.name}"'


def _check(result: dict) -> None:
    """The stored shape, checked once on the way in (the page trusts it afterwards)."""
    try:
        _check_shape(result)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"not a bench/active.py result: {exc}") from exc


def _check_shape(result: dict) -> None:
    curves = result.get("curves")
    if not isinstance(curves, dict) or set(curves) - set(ORDERS):
        raise ValueError("result.curves must map ranked/random to lists of curves")
    for order, runs in curves.items():
        if not isinstance(runs, list) or len(runs) > MAX_RUNS:
            raise ValueError(f"result.curves.{order} must be a list of at most {MAX_RUNS} curves")
        for curve in runs:
            if not isinstance(curve, list) or len(curve) > MAX_POINTS:
                raise ValueError(f"each curve is a list of at most {MAX_POINTS} [labels, accuracy] points")
            for point in curve:
                labels, accuracy = point
                if not isinstance(labels, int) or not 0.0 <= float(accuracy) <= 1.0:
                    raise ValueError("each point is [labels (int), accuracy in [0, 1]]")
    for key in ("all_labels_accuracy", "target"):
        if not 0.0 <= float(result.get(key, -1)) <= 1.0:
            raise ValueError(f"result.{key} must be in [0, 1]")


def label_efficiency_store(*, project: Project, result: dict, command: str) -> LabelEfficiency:
    """Keep the project's newest measurement (replacing the previous one)."""
    _check(result)
    row, _ = LabelEfficiency.objects.update_or_create(
        project=project, defaults={"result": result, "command": command[:500]}
    )
    return row


def _needed(curve: list, target: float) -> int | None:
    return next((int(n) for n, accuracy in curve if accuracy >= target), None)


def _mean(values: list[int | None]) -> float | None:
    reached = [v for v in values if v is not None]
    return sum(reached) / len(reached) if reached else None


def label_efficiency_data(*, project: Project) -> LabelEfficiencyData | None:
    row = LabelEfficiency.objects.filter(project=project).first()
    if row is None:
        return None
    result, runs = row.result, []
    target = float(result["target"])
    needed: dict[str, list[int | None]] = {order: [] for order in ORDERS}
    for order in ORDERS:
        for seed, curve in enumerate(result["curves"].get(order, [])):
            reach = _needed(curve, target)
            needed[order].append(reach)
            runs.append(
                LabelEfficiencyRun(
                    order=order,  # type: ignore[typeddict-item]  # checked: one of ORDERS
                    seed=seed,
                    labels=[int(n) for n, _ in curve],
                    accuracy=[float(a) for _, a in curve],
                    needed=reach,
                )
            )
    return LabelEfficiencyData(
        measured_at=row.measured_at.isoformat(),
        command=row.command,
        metric=str(result.get("metric", "accuracy")),
        all_labels_accuracy=float(result["all_labels_accuracy"]),
        target=target,
        runs=runs,
        ranked_needed=_mean(needed["ranked"]),
        random_needed=_mean(needed["random"]),
    )
