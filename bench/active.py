"""Label efficiency of the ranked labeling queue against random order, on real ManiSkill PickCube data.

1. The project's own scripted agent (ManiSkill's motion-planning solution, robot_agent) plays PickCube
   episodes on the CPU, the goal marker shown (`--no-show-goal`: hidden, ManiSkill's default); every
   step's main-camera frame is labeled by the env's success flag. These are the full labels; the bench
   hides them. `--hold-steps N`: the robot holds still N steps after the plan ends (the plan stops as
   soon as the cube is at the goal, leaving about 5 success frames an episode).
2. A simulated labeler answers from the hidden labels. Starting from a few random labels, each round
   trains the project's ResNet (`--steps` Adam steps on mini-batches of 32 with random-crop augmentation,
   successes weighted by the labels' fail/success ratio, or with `--success-share S` class-balanced
   mini-batches, S of each from the labeled successes, unweighted; `--warm-start` goes on from the previous
   round's model; `--ema D` evaluates the weights' moving average; `--crop` trains on part of each frame)
   on the labels so far, measures balanced accuracy (mean of the success and fail recalls; about 93% of
   frames are fails, 68% with `--hold-steps 25`) on held-out episodes, then asks for the next labels (up
   to the next count of `--labels`, else `--batch` more) either in the ranked queue's order
   (training/queue/ranking.py: uncertainty, the two newest models' disagreement, spread across episodes,
   and, as in the app, `--explore-share` of the picks (default the app's 0.5) coverage picks: the most
   typical frame of each group of frames (k-means in the round model's embedding) that holds no labeled
   frame, or with `--coverage farthest` k-center greedy away from the labeled frames; the env flag is NOT
   given to the ranker, since here it is the label, nor any hidden label) or in random order. Without `--warm-start`
   each round trains a fresh model, as the app's retrain does. `--device cuda` trains on a GPU.
3. It prints accuracy against labels (and how many of them are successes) for both orders and several
   seeds, the accuracy all labels give, and the labels each order needs to reach 95% of it. Target:
   ranked needs at most half of random.

Measured (2026-11-26, one H100, each (order, seed) its own process, `--first-seed S --seeds 1 --device
cuda`; data `--size 64 --hold-steps 25 --max-steps 140 --crop 0.05,0.2,0.6,0.6 --episodes 18
--val-episodes 8`, 1802 pool frames; `--labels 8,16,32,64,96,128,192,256,384,512 --steps 400 --full-steps
600 --ema 0.99`, fresh model each round): all labels 0.953 (mean of 40 trainings; 0.908-0.971, GPU
training is not bit-exact), target 0.905. Labels to the target per seed 0-4: ranked (the app's default,
typical coverage 0.5) 32, 96, 64, 384, 128 (mean 141, median 96); random 64, 96, 384, 512, 256 (mean
262, median 256; another random run: 64, 128, 256, 512, 256). Value-only ranking (0.0) and k-center
coverage needed more than random; the seeds' spread is about as large as the gain.

    .venv/bin/python bench/active.py [--episodes 6] [--val-episodes 2] [--size 32] [--seeds 2]
        [--start 4] [--batch 4] [--rounds 6] [--labels 8,16,32,64] [--steps 15] [--warm-start]
        [--first-steps N] [--full-steps N] [--lr 1e-3] [--success-share 0] [--ema 0] [--hold-steps 0]
        [--crop top,left,height,width] [--crop-padding 4] [--pool 1] [--episode-decay 0.5]
        [--explore-share 0.5] [--coverage typical|farthest] [--device cpu] [--first-seed 0]
        [--json out.json] [--cache episodes.npz] [--project NAME]  (stores the result for the project's
        evaluation pages)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # after the root: bench/inference.py must not hide the package

import numpy as np  # noqa: E402
from harness import parse_args  # noqa: E402

from training.queue.ranking import COVERAGE_KINDS, EXPLORE_SHARE, NEIGHBOUR_STEPS  # noqa: E402


def collect(
    episodes: int, size: int, max_steps: int, show_goal: bool, hold_steps: int = 0, first_seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(frames uint8 [T,H,W,3], env success [T]) per scripted PickCube episode (seeds `first_seed` on).
    PickCube's success is "cube at the goal and robot still"; ManiSkill hides the goal from cameras unless
    `show_goal` (RLinf shows it when it collects reward-model data), and without it no frame shows where
    the goal is. The plan ends as soon as the cube is there, so an episode has only a few success frames;
    `hold_steps` more steps after the plan's end keep its last action (the robot holds still, as an RL
    episode goes on until its time limit)."""
    from robot_agent.maniskill_robot import JOINT_POS, ManiSkillRobot
    from robot_agent.policies import ScriptedPickCubePolicy

    robot = ManiSkillRobot(
        control_mode=JOINT_POS, width=size, height=size, max_episode_steps=max_steps, show_goal_site=show_goal
    )
    robot.connect()
    policy = ScriptedPickCubePolicy()
    out = []
    try:
        for seed in range(first_seed, first_seed + episodes):
            obs = robot.reset(seed=seed)
            policy.reset(seed)
            frames, success = [obs.images[robot.cameras[0]]], [obs.success]
            held = 0
            while len(frames) < max_steps and (not policy.finished or held < hold_steps):
                held += policy.finished  # past the plan's end the policy repeats its last action
                obs = robot.send_action(policy.act(obs))
                frames.append(obs.images[robot.cameras[0]])
                success.append(obs.success)
            out.append((np.stack(frames), np.asarray(success, dtype=bool)))
            print(f"episode {seed}: {len(frames)} steps, {int(np.sum(success))} success", file=sys.stderr)
    finally:
        robot.disconnect()
    return out


def collected(args) -> list[tuple[np.ndarray, np.ndarray]]:
    """The episodes, from `--cache` when it holds enough of them at this size (tuning reruns skip ManiSkill)."""
    wanted = args.episodes + args.val_episodes
    cache = Path(args.cache) if args.cache else None
    if cache is not None and cache.exists():
        with np.load(cache) as stored:
            count = int(stored["count"])
            goal = bool(stored["show_goal"]) if "show_goal" in stored else False
            hold = int(stored["hold_steps"]) if "hold_steps" in stored else 0
            same = stored["f0"].shape[1] == args.size and goal == args.show_goal and hold == args.hold_steps
            if count >= wanted and same:
                return [(stored[f"f{i}"], stored[f"s{i}"]) for i in range(wanted)]
    data = collect(wanted, args.size, args.max_steps, args.show_goal, args.hold_steps)
    if cache is not None:
        arrays = {f"f{i}": f for i, (f, _) in enumerate(data)} | {f"s{i}": s for i, (_, s) in enumerate(data)}
        np.savez_compressed(
            cache,
            count=np.asarray(len(data)),
            show_goal=np.asarray(args.show_goal),
            hold_steps=np.asarray(args.hold_steps),
            **arrays,
        )
    return data


def fit(
    images: np.ndarray,
    labels: np.ndarray,
    steps: int,
    seed: int,
    *,
    start=None,
    crop_padding: int = 4,
    lr: float = 1e-3,
    batch_size: int = 32,
    success_share: float = 0.0,
    ema: float = 0.0,
    device: str = "cpu",
):
    """The project's ResNet trained for `steps` Adam steps on mini-batches of at most `batch_size` labeled
    frames (random crops after edge padding, as the project's training augments), successes weighted by
    the fail/success ratio of the labels (they are rare in PickCube). With `success_share` > 0 the loss
    is unweighted and each mini-batch is drawn class-balanced instead: that share of it from the labeled
    successes, the rest from the fails (each with replacement when there are too few; 1/3 is the app's
    2:1 fail:success ratio). `start`: go on from a copy of this model (warm start, as a retrain after a
    few more labels can) instead of a fresh one. With `ema` > 0 the returned model is the exponential
    moving average of the weights (BatchNorm statistics included; decay `min(ema, (1+t)/(10+t))` at step
    t), which damps the last mini-batches' noise; a warm start then trains on from the raw weights and
    goes on averaging into the returned ones."""
    import copy

    import torch

    from training.resnet.config import ResNetConfig
    from training.resnet.model import RewardResNet
    from training.resnet.train import random_crop

    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    if start is not None:
        model = copy.deepcopy(vars(start).get("raw", start)).train()
    else:
        config = ResNetConfig(image_size=[3, images.shape[1], images.shape[2]], hidden_dim=16, dropout=0.0)
        model = RewardResNet(config).train()
    model.to(device)
    average = None
    if ema > 0:
        average = copy.deepcopy(start if start is not None and "raw" in vars(start) else model)
        averaged = getattr(start, "averaged_steps", 0) if start is not None else 0
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    if start is not None and getattr(start, "adam_state", None):
        optimizer.load_state_dict(start.adam_state)  # Adam's moments go on too (a fresh Adam jolts the model)
    positives = int(np.sum(labels))
    weight = torch.tensor(max(1.0, (len(labels) - positives) / max(1, positives)), device=device)
    frames = torch.from_numpy(images).to(device)
    balanced = success_share > 0 and 0 < positives < len(labels)
    if success_share > 0:
        weight = torch.tensor(1.0, device=device)
    for _ in range(steps):
        if balanced:
            rows = balanced_rows(labels, batch_size, success_share, rng)
        else:
            rows = rng.choice(len(labels), size=batch_size, replace=False) if len(labels) > batch_size else slice(None)
        x, y = (
            random_crop(frames[rows], crop_padding, generator),
            torch.tensor(labels[rows], dtype=torch.float32, device=device),
        )
        optimizer.zero_grad()
        logits = model(x).float().reshape(-1)
        torch.nn.functional.binary_cross_entropy_with_logits(logits, y, pos_weight=weight).backward()
        optimizer.step()
        if average is not None:
            decay = min(ema, (1 + averaged) / (10 + averaged))
            averaged += 1
            with torch.no_grad():
                pairs = list(zip(average.state_dict().values(), model.state_dict().values(), strict=True))
                kept = [k for k, _ in pairs if k.is_floating_point()]
                torch._foreach_mul_(kept, decay)
                torch._foreach_add_(kept, [n for k, n in pairs if k.is_floating_point()], alpha=1 - decay)
                for k, n in pairs:
                    if not k.is_floating_point():
                        k.copy_(n)
    model.adam_state = copy.deepcopy(optimizer.state_dict())
    if average is None:
        return model.eval()
    object.__setattr__(average, "raw", model)  # not a submodule: the average's state_dict stays its own
    average.averaged_steps, average.adam_state = averaged, model.adam_state
    return average.eval()


def balanced_rows(labels: np.ndarray, batch_size: int, success_share: float, rng: np.random.Generator) -> np.ndarray:
    """A mini-batch's rows: round(batch_size * success_share) (at least 1) successes, the rest fails, each
    drawn without replacement while the class has enough frames."""
    success, fail = np.flatnonzero(labels), np.flatnonzero(labels == 0)
    n_success = min(batch_size - 1, max(1, round(batch_size * success_share)))
    picks = [
        rng.choice(rows, size=n, replace=len(rows) < n)
        for rows, n in ((success, n_success), (fail, batch_size - n_success))
    ]
    return np.concatenate(picks)


def crop_frames(frames: np.ndarray, box: list[float]) -> np.ndarray:
    """Frames [T,H,W,3] cut to `box` = [top, left, height, width] as fractions (the app's ResNet `crop`)."""
    _, h, w, _ = frames.shape
    top, left = round(box[0] * h), round(box[1] * w)
    return frames[:, top : top + round(box[2] * h), left : left + round(box[3] * w)]


def shrink(frames: np.ndarray, factor: int) -> np.ndarray:
    """Average-pool uint8 frames [T,H,W,3] by `factor` (H and W must divide by it)."""
    t, h, w, c = frames.shape
    return frames.reshape(t, h // factor, factor, w // factor, factor, c).mean(axis=(2, 4)).round().astype(np.uint8)


def balanced_accuracy(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """Mean of the success and fail recalls: plain accuracy would reward calling every frame a fail (about
    93% of PickCube frames are)."""
    judged = probabilities > 0.5
    recalls = [float(np.mean(judged[labels == value] == value)) for value in (True, False) if np.any(labels == value)]
    return sum(recalls) / len(recalls)


def predict(model, images: np.ndarray) -> np.ndarray:
    from training.resnet.model import predict_proba

    return predict_proba(model, images).astype(np.float64)


def predict_with_features(model, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities and the model's embedding of each frame (what the app's queue ranks with)."""
    from training.resnet.model import predict_proba_and_features

    probabilities, features = predict_proba_and_features(model, images)
    return probabilities.astype(np.float64), features


def label_schedule(args) -> list[int]:
    """How many labels each round trains on: `--labels` as given, else `--start` plus `--batch` per round."""
    if args.labels:
        return [int(n) for n in args.labels.split(",")]
    return [args.start + args.batch * k for k in range(args.rounds + 1)]


def simulate(
    pool_x, pool_y, pool_ep, val_x, val_y, *, order: str, seed: int, args
) -> tuple[list[tuple[int, float]], list[int]]:
    """(labels, balanced accuracy) per round, and how many of the labels were successes."""
    from training.queue.ranking import Candidate, rank

    rng = np.random.default_rng(seed)
    schedule = label_schedule(args)
    labeled = list(rng.choice(len(pool_y), size=schedule[0], replace=False))
    curve, successes, previous = [], [], None
    for round_ in range(len(schedule)):
        start = previous if args.warm_start else None
        steps = args.steps if start is not None or not args.warm_start else args.first_steps
        model = fit(
            pool_x[labeled],
            pool_y[labeled],
            steps,
            seed,
            start=start,
            crop_padding=args.crop_padding,
            lr=args.lr,
            success_share=args.success_share,
            ema=args.ema,
            device=args.device,
        )
        accuracy = balanced_accuracy(predict(model, val_x), val_y)
        curve.append((len(labeled), accuracy))
        successes.append(int(pool_y[labeled].sum()))
        print(
            f"  {order} seed {seed}: {len(labeled)} labels ({successes[-1]}+): {accuracy:.3f}",
            file=sys.stderr,
            flush=True,
        )
        rest = np.setdiff1d(np.arange(len(pool_y)), labeled)
        if not len(rest) or round_ + 1 == len(schedule):
            break
        wanted = min(schedule[round_ + 1] - len(labeled), len(rest))
        if order == "random":
            picks = list(rng.choice(rest, size=wanted, replace=False))
        else:
            probs, features = predict_with_features(model, pool_x)
            others: np.ndarray | None = predict(previous, pool_x[rest]) if previous is not None else None
            candidates = [
                Candidate(
                    str(pool_ep[i]),
                    int(i),
                    float(probs[i]),
                    None if others is None else float(others[k]),
                    features=features[i],
                )
                for k, i in enumerate(rest)
            ]
            ranked = rank(
                candidates,
                limit=wanted,
                episode_decay=args.episode_decay,
                neighbour_steps=args.neighbour_steps,
                explore_share=args.explore_share,
                labeled_features=features[labeled],
                seed=seed,
                coverage=args.coverage,
            )
            picks = [r.candidate.step for r in ranked]
        labeled += picks
        previous = model
    return curve, successes


def labels_to_reach(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((n for n, acc in curve if acc >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--val-episodes", type=int, default=2)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=120)
    parser.add_argument(
        "--hold-steps",
        type=int,
        default=0,
        help="steps the robot holds still after the scripted plan ends (more success frames per episode)",
    )
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds run from this one (parallel runs can split the seeds)"
    )
    parser.add_argument("--start", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=15, help="training steps per round (mini-batches of 32)")
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="each round goes on from the previous round's model (the first trains --first-steps)",
    )
    parser.add_argument("--first-steps", type=int, default=0, help="the first round's steps with --warm-start")
    parser.add_argument("--full-steps", type=int, default=0, help="steps of the all-labels model (default --steps)")
    parser.add_argument(
        "--labels", default="", help="label counts per round, e.g. 8,16,32,64 (overrides --start/--batch/--rounds)"
    )
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    parser.add_argument(
        "--success-share",
        type=float,
        default=0.0,
        help="class-balanced mini-batches: this share of each from the labeled successes (0: weighted loss)",
    )
    parser.add_argument(
        "--ema", type=float, default=0.0, help="evaluate an exponential moving average of the weights (e.g. 0.98)"
    )
    parser.add_argument("--crop-padding", type=int, default=4, help="random-crop augmentation (0: none)")
    parser.add_argument(
        "--show-goal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="render PickCube's goal marker (success means the cube is at it)",
    )
    parser.add_argument("--episode-decay", type=float, default=0.5, help="the ranking's spread across episodes")
    parser.add_argument(
        "--neighbour-steps",
        type=int,
        default=NEIGHBOUR_STEPS,
        help="the ranking's spread over each episode (0: none)",
    )
    parser.add_argument(
        "--explore-share",
        type=float,
        default=EXPLORE_SHARE,
        help="the ranking's share of coverage picks (k-center in the model's embedding; 0: value only)",
    )
    parser.add_argument(
        "--coverage", default="typical", choices=COVERAGE_KINDS, help="how the ranking's coverage picks are chosen"
    )
    parser.add_argument("--device", default="cpu", help="torch device the models train and predict on")
    parser.add_argument("--orders", default="ranked,random", help="which orders to measure")
    parser.add_argument(
        "--crop", default="", help="top,left,height,width fractions of each frame to train on (the app's crop)"
    )
    parser.add_argument("--pool", type=int, default=1, help="average-pool frames by this factor (cheaper training)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default="")
    parser.add_argument("--project", default="", help="store the result as this project's label efficiency")
    parser.add_argument("--cache", default="", help="npz file: reuse the collected episodes (written when missing)")
    args = parse_args(parser, episodes=1, val_episodes=1, size=16, max_steps=80, seeds=1, rounds=2, steps=3)

    import torch

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    data = collected(args)
    if args.crop:
        box = [float(v) for v in args.crop.split(",")]
        data = [(np.ascontiguousarray(crop_frames(frames, box)), success) for frames, success in data]
    if args.pool > 1:
        data = [(shrink(frames, args.pool), success) for frames, success in data]
    pool, val = data[: args.episodes], data[args.episodes :]
    pool_x = np.concatenate([f for f, _ in pool])
    pool_y = np.concatenate([s for _, s in pool]).astype(np.int64)
    pool_ep = np.concatenate([np.full(len(s), i) for i, (_, s) in enumerate(pool)])
    val_x = np.concatenate([f for f, _ in val])
    val_y = np.concatenate([s for _, s in val]).astype(bool)
    args.first_steps = args.first_steps or args.steps
    full_model = fit(
        pool_x,
        pool_y,
        args.full_steps or args.steps,
        0,
        crop_padding=args.crop_padding,
        lr=args.lr,
        success_share=args.success_share,
        ema=args.ema,
        device=args.device,
    )
    full = balanced_accuracy(predict(full_model, val_x), val_y)
    target = 0.95 * full
    print(
        f"pool {len(pool_y)} frames ({pool_y.sum()} success), val {len(val_y)} ({val_y.sum()} success); "
        f"all labels: balanced accuracy {full:.3f}; points are labels(successes among them):accuracy",
        flush=True,
    )
    results: dict = {"metric": "balanced accuracy", "all_labels_accuracy": full, "target": target, "curves": {}}
    orders = [o for o in ("ranked", "random") if o in args.orders.split(",")]
    for order in orders:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            curve, successes = simulate(pool_x, pool_y, pool_ep, val_x, val_y, order=order, seed=seed, args=args)
            results["curves"].setdefault(order, []).append(curve)
            results.setdefault("successes", {}).setdefault(order, []).append(successes)
            needed = labels_to_reach(curve, target)
            points = "  ".join(f"{n}({s}+):{a:.3f}" for (n, a), s in zip(curve, successes, strict=True))
            print(f"{order:6s} seed {seed}: {points}  -> {needed}", flush=True)
    for order in orders:
        needs = [labels_to_reach(c, target) for c in results["curves"][order]]
        reached = [n for n in needs if n is not None]
        results[f"{order}_labels_needed"] = needs
        mean = sum(reached) / len(reached) if reached else None
        print(f"{order}: labels to reach {target:.3f} (95% of all-label accuracy): {needs} (mean {mean})")
    print(f"took {time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.project:
        store(args.project, results)


def store(project_name: str, results: dict) -> None:
    """Keep the result as the project's label efficiency (its evaluation pages plot the two curves)."""
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    django.setup()
    from projects.models import Project
    from training.queue.efficiency import label_efficiency_store

    project = Project.objects.get(name=project_name)
    label_efficiency_store(project=project, result=results, command=" ".join(["bench/active.py", *sys.argv[1:]]))
    print(f"stored as the label efficiency of project {project.name!r}")


if __name__ == "__main__":
    main()
