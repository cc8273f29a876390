"""Does the README's tour end with a good model, run after run? The tour's steps on the run command's demo data,
trained several times, each model judged on its held-out episodes as the evaluation page judges it.

The steps: the demo's PickCube episodes (rendered once into DEMO_CACHE_DIR, as `manage.py setup_demo` seeds
them, labeled by the lift or by the env's success flag), a snapshot with the snapshot form's defaults (PNG
folders and the VLM trend export off: the model does not read them), and ResNet jobs from the job form's
*PickCube workspace* preset (`--preset defaults`: the plain defaults), with seeds 0, 1, ... Each row prints a model's ROC AUC and best accuracy on its
validation frames beside the sanity check's limits (AUC 0.55 and the majority share), and whether it passes.
Training runs in this process, as the `training` worker runs a job. Self-contained (a scratch SQLite database):

    .venv/bin/python bench/tour_model.py [--episodes 24] [--size 128] [--labels lifted] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))
import harness  # noqa: E402

harness.scratch_environment("tour-model")
from training.presets import PRESETS  # noqa: E402  (no Django: plain values)


def form_values(form) -> dict:
    """What a browser posts for an untouched form: each field's initial value."""
    return {name: form.initial.get(name, field.initial) for name, field in form.fields.items()}


def demo_project(episodes: int, size: int, labels: str):
    from labeling.models import Project
    from webapp.demo.pickcube import DEMO_TASK, demo_episodes, progress_bar, seed_pickcube_episodes

    started = time.monotonic()
    rendered = demo_episodes(episodes, size=size, progress=progress_bar())
    project = Project.objects.create(
        name=f"tour model {episodes}x{size} {labels}", task_description=DEMO_TASK, camera_views=["main", "extra"]
    )
    seed_pickcube_episodes(project=project, episodes=rendered, labels=labels)
    print(f"{episodes} PickCube episodes at {size} px labeled by {labels!r} in {time.monotonic() - started:.0f} s")
    return project


def snapshot(project, val_split: float | None):
    from training.forms import SnapshotForm
    from training.snapshots.services import snapshot_create

    options = form_values(SnapshotForm(project=project)) | {"trend": False, "png_folders": False}
    if val_split is not None:
        options["val_split"] = val_split
    built = snapshot_create(project=project, options=options)
    train, val = built.stats["train"], built.stats["val"]
    print(
        f"snapshot (the form's defaults{'' if val_split is None else f', val_split {val_split}'}): {len(built.stats['val_episodes'])} of {built.stats['episodes']} episodes "
        f"held out; train {train['total']} frames ({train['success']} success), val {val['total']} "
        f"({val['success']} success)"
    )
    return built


def train(project, built, preset: str, size: int, seed: int, epochs: int | None) -> dict:
    from training.evaluation import metrics
    from training.evaluation.model_evaluation import model_predictions
    from training.forms import JobForm
    from training.models import TrainedModel
    from training.services import job_create, job_execute

    initial = PRESETS[preset].form_initial(size)  # the training page's preset link for this camera size
    data = form_values(JobForm(project=project, initial=initial)) | initial
    data |= {"snapshot": built.pk, "seed": seed} | ({"epochs": epochs} if epochs else {})
    form = JobForm({k: v for k, v in data.items() if v is not None}, project=project)
    if not form.is_valid():
        raise SystemExit(f"the preset's job form does not validate: {form.errors.as_text()}")
    job = job_create(project=project, snapshot=built, config=form.config(), enqueue=False)
    started = time.monotonic()
    job_execute(job_id=job.pk)
    seconds = time.monotonic() - started
    model = TrainedModel.objects.get(job=job)
    probs, labels = model_predictions(model=model, snapshot=built)
    majority = max(labels.mean(), 1 - labels.mean())
    return {
        "seconds": seconds,
        "auc": metrics.roc_curve(probs, labels)["auc"],
        "best": metrics.best_accuracy(probs, labels),
        "majority": majority,
        "passes": not metrics.sanity_check(probs, labels),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=24, help="demo episodes (the run command seeds 24)")
    parser.add_argument("--size", type=int, default=128, help="camera size in pixels (the run command's: 128)")
    parser.add_argument("--labels", default="lifted", choices=["lifted", "env success"], help="frame labels")
    parser.add_argument("--runs", type=int, default=3, help="training runs (seeds 0, 1, ...)")
    parser.add_argument("--val-split", type=float, default=None, help="the snapshot's (default: the form's)")
    parser.add_argument("--preset", default="pickcube", choices=sorted(PRESETS), help="the job form's preset")
    parser.add_argument("--epochs", type=int, default=0, help="0: the preset's")
    args = harness.parse_args(parser, episodes=3, size=64, runs=1, epochs=1)
    import django

    django.setup()
    from django.core.management import call_command

    from training.evaluation.metrics import MIN_USEFUL_AUC

    call_command("migrate", verbosity=0)
    project = demo_project(args.episodes, args.size, args.labels)
    built = snapshot(project, args.val_split)
    print(f"preset {args.preset!r}: {PRESETS[args.preset].label}")
    print(f"{'run':>3} {'train s':>8} {'ROC AUC':>8} {'limit':>6} {'best acc':>9} {'majority':>9}  sanity check")
    results = []
    for seed in range(args.runs):
        result = train(project, built, args.preset, args.size, seed, args.epochs or None)
        results.append(result)
        print(
            f"{seed:>3} {result['seconds']:>8.0f} {result['auc']:>8.3f} {MIN_USEFUL_AUC:>6.2f} {result['best']:>9.3f} "
            f"{result['majority']:>9.3f}  {'passes' if result['passes'] else 'fails'}",
            flush=True,
        )
    aucs = [r["auc"] for r in results]
    print(
        f"passed {sum(r['passes'] for r in results)} of {len(results)}; ROC AUC median {statistics.median(aucs):.3f}, "
        f"lowest {min(aucs):.3f}"
    )


if __name__ == "__main__":
    main()
