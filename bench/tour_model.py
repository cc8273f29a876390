"""Does the README's tour end with a good model, run after run? The tour's steps on the run command's demo data,
trained several times, each model judged on its held-out episodes as the evaluation page judges it.

The steps: the demo's PickCube episodes (rendered once into DEMO_CACHE_DIR, as `manage.py setup_demo` seeds
them, labeled by the lift or by the env's success flag), a snapshot with the snapshot form's defaults (PNG
folders and the VLM trend export off: the model does not read them), and ResNet jobs from the job form's
*PickCube workspace* preset (`--preset defaults`: the plain defaults), with seeds 0, 1, ... Each row prints a model's ROC AUC and best accuracy on its
validation frames beside the sanity check's limits (AUC 0.55 and the majority share), and whether it passes.
Training runs in this process, as the `training` worker runs a job. With `--rlinf` each model is also scored as
an RLinf run pointed at it would: RLinf 0.3.0's own `ResNetRewardModel` (in the interop environment,
bench/interop/rlinf_score.py) loads `model.safetensors` with the `reward.model` block the model's download carries
and scores the snapshot's `val.pt` as its `RewardBinaryDataset` reads it; the row prints RLinf's accuracy at 0.5
and its largest difference from the served probabilities (the limit: 1e-5 where the app says RLinf reproduces
the model). Each run also prints the model's out-of-distribution figures (training.resnet.ood): what calibrated the
threshold (the training episodes cross-fitted and the validation frames), `val_flagged`, the validation frames
past it (part of the calibration: at most about 1%), the frames of `--held-out` more demo episodes that the
project never saw, scored as a deployment scores them (the honest rate: neither the Gaussians nor the threshold
were fitted on them), and the evaluation page's probes (blank, constant, noise, photometric shifts), each with the
fraction flagged and its median score over the threshold. The machine's load average is printed at the start and
the end. Self-contained (a scratch SQLite database):

    .venv/bin/python bench/tour_model.py [--episodes 24] [--size 128] [--labels lifted] [--runs 3] [--rlinf]
        [--held-out 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
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
    from projects.models import Project
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


def rlinf_scores(model, built) -> tuple[float, float]:
    """RLinf's own class on the model's files: its accuracy at 0.5 on the validation frames and its largest
    difference from the probabilities the app serves (bench/interop/rlinf_score.py in the interop environment)."""
    import numpy as np

    from training.evaluation.model_evaluation import model_predictions
    from training.resnet.config import ResNetConfig
    from training.resnet.rlinf_match import rlinf_reward_model_config
    from training.storage import local_path

    python = ROOT / ".interop" / "bin" / "python"
    if not python.is_file():
        raise SystemExit("--rlinf needs the interop environment: source scripts/lib.sh; ensure_interop_env")
    weights = local_path(model.checkpoint_path) / "model.safetensors"
    block = rlinf_reward_model_config(ResNetConfig.from_dict(model.config), str(weights))
    request = {"val": str(local_path(built.folder) / "val.pt"), "model": block}
    done = subprocess.run(
        [str(python), str(ROOT / "bench" / "interop" / "rlinf_score.py")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"RLinf's class failed on the model:\n{done.stderr[-3000:]}")
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    served, labels = model_predictions(model=model, snapshot=built)
    rlinf = np.asarray(theirs["probabilities"])
    assert theirs["labels"] == labels.tolist(), "RLinf reads the validation frames in another order"
    return float(((rlinf > 0.5) == (labels == 1)).mean()), float(np.abs(rlinf - served).max())


def held_out_frames(episodes: int, count: int, size: int, camera: str):
    """Every frame of `count` demo episodes after the project's (seeds the project never saw), [N,H,W,3] uint8."""
    import numpy as np

    from webapp.demo.pickcube import FIRST_SEED, demo_episodes, progress_bar

    if count == 0:
        return np.zeros((0, size, size, 3), np.uint8)
    rendered = demo_episodes(count, size=size, first_seed=FIRST_SEED + episodes, progress=progress_bar())
    frames = np.concatenate([episode.images[camera] for episode in rendered])
    print(
        f"held out: {len(frames)} frames of {count} more demo episodes (seeds {FIRST_SEED + episodes}.."
        f"{FIRST_SEED + episodes + count - 1}, camera {camera!r}), in no snapshot"
    )
    return frames


def ood_figures(model, frames) -> dict:
    """The model's OOD statistics (training.resnet.ood) as the evaluation page and a deployment see them: the
    validation split's flagged fraction, the held-out frames flagged by the inference workers' scorer, the
    evaluation panel's probes."""
    import numpy as np

    from training.kit.family_parts import ModelSpec
    from training.resnet.ood import ood_load
    from training.resnet.scorer import ResNetScorer
    from training.storage import local_path

    folder = local_path(model.checkpoint_path)
    stats = ood_load(folder)
    if stats is None:
        raise SystemExit("the model has no OOD statistics (training.resnet.ood)")
    scorer = ResNetScorer(ModelSpec(kind=model.kind, folder=folder, config=model.config))
    scored = [item for start in range(0, len(frames), 64) for item in scorer.score(frames[start : start + 64])]
    items = [item for item in scored if isinstance(item, dict)]  # with statistics every item is a dict
    flagged = [bool(item["ood"]) for item in items]
    return {
        "threshold": stats.threshold,
        "calibration": stats.calibration,
        "val_flagged": stats.val_flagged,
        "held_out_frames": len(flagged),
        "held_out_flagged": float(np.mean(flagged)) if flagged else float("nan"),
        "held_out_max_score": max((item["ood_score"] for item in items), default=float("nan")),
        "probes": model.ood_panel["probes"],
    }


def print_ood(result: dict) -> None:
    ood = result["ood"]
    held = ood["held_out_frames"]
    print(
        f"    OOD: threshold {ood['threshold']:.3f} (calibrated on {ood['calibration']}); val_flagged "
        f"{ood['val_flagged']:.2%} (part of the calibration); held-out episodes: {round(ood['held_out_flagged'] * held) if held else 0} of {held} frames "
        f"flagged ({ood['held_out_flagged']:.2%}, limit 1%), highest score {ood['held_out_max_score']:.2f} x threshold"
    )
    print(f"    {'probe':<24} {'frames':>6} {'mean prob':>9} {'flagged':>8} {'score':>6}")
    for row in ood["probes"]:
        print(
            f"    {row['probe']:<24} {row['frames']:>6} {row['probability']:>9.3f} {row['flagged']:>8.0%} "
            f"{row['score']:>6.2f}"
        )


def train(
    project, built, preset: str, size: int, seed: int, epochs: int | None, rlinf: bool = False, held_out=None
) -> dict:
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
    rlinf_accuracy, rlinf_difference = rlinf_scores(model, built) if rlinf else (float("nan"), float("nan"))
    match = model.rlinf_match
    return {
        "rlinf_accuracy": rlinf_accuracy,
        "rlinf_difference": rlinf_difference,
        "rlinf_equal": bool(match and match.equal),
        "accuracy": float(((probs > 0.5) == (labels == 1)).mean()),
        "seconds": seconds,
        "auc": metrics.roc_curve(probs, labels)["auc"],
        "best": metrics.best_accuracy(probs, labels),
        "majority": majority,
        "passes": not metrics.sanity_check(probs, labels),
        "ood": ood_figures(model, held_out),
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
    parser.add_argument("--rlinf", action="store_true", help="also score each model with RLinf's own class")
    parser.add_argument("--held-out", type=int, default=6, help="more demo episodes for the OOD rate (0: none)")
    args = harness.parse_args(parser, episodes=3, size=64, runs=1, epochs=1, rlinf=True, held_out=1)
    import django

    django.setup()
    from django.core.management import call_command

    from training.evaluation.metrics import MIN_USEFUL_AUC

    call_command("migrate", verbosity=0)
    print(f"load average at the start {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (1 minute)")
    project = demo_project(args.episodes, args.size, args.labels)
    built = snapshot(project, args.val_split)
    frames = held_out_frames(args.episodes, args.held_out, args.size, built.options["camera"])
    print(f"preset {args.preset!r}: {PRESETS[args.preset].label}")
    print(
        f"{'run':>3} {'train s':>8} {'ROC AUC':>8} {'limit':>6} {'best acc':>9} {'acc@0.5':>8} {'majority':>9}"
        f"  sanity check   {'RLinf acc@0.5':>13} {'RLinf max diff':>14} {'limit':>6}  app says RLinf"
    )
    results = []
    for seed in range(args.runs):
        result = train(project, built, args.preset, args.size, seed, args.epochs or None, args.rlinf, frames)
        results.append(result)
        print(
            f"{seed:>3} {result['seconds']:>8.0f} {result['auc']:>8.3f} {MIN_USEFUL_AUC:>6.2f} {result['best']:>9.3f} "
            f"{result['accuracy']:>8.3f} {result['majority']:>9.3f}  {'passes' if result['passes'] else 'fails':<12}  "
            f"{result['rlinf_accuracy']:>13.3f} {result['rlinf_difference']:>14.2e} {1e-5:>6.0e}  "
            f"{'reproduces it' if result['rlinf_equal'] else 'differs'}",
            flush=True,
        )
        print_ood(result)
    aucs = [r["auc"] for r in results]
    print(
        f"passed {sum(r['passes'] for r in results)} of {len(results)}; ROC AUC median {statistics.median(aucs):.3f}, "
        f"lowest {min(aucs):.3f}"
    )
    held = [r["ood"]["held_out_flagged"] for r in results]
    print(
        f"OOD: val_flagged median {statistics.median(r['ood']['val_flagged'] for r in results):.2%}; held-out "
        f"frames flagged median {statistics.median(held):.2%}, highest {max(held):.2%} (limit 1%); load average at "
        f"the end {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
