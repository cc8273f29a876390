"""The demo reward model, step by step: the demo's PickCube episodes labeled by the lift, a ResNet trained
on the CPU, a deployment at the threshold picked from validation, and the live check on new seeds scored
through the inference worker's own scorer. `manage.py demo` calls these in order."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from labeling.ingest.selectors import stored_frame_width
from projects.models import Project
from training.presets import WORKSPACE_CROP, workspace_input_size

from .episode_cache import cache_path, episode_load, render_missing, render_workers
from .pickcube import DEMO_TASK, LIFTED, Writer, demo_episodes, progress_bar, seed_pickcube_episodes
from .report import SeedCheck, accuracy_at, pick_threshold, seed_check

if TYPE_CHECKING:
    from inference.models import Deployment
    from training.models import DatasetSnapshot, TrainedModel

CAMERA = "main"  # the camera the teleop dashboard scores
# The model sees only the main camera's workspace (training.presets.WORKSPACE_CROP, in training and serving
# alike) at the camera's own resolution, so a 128 px camera gives the ~6 px cube a 64 px model input at the
# cost of a 64 px frame. The model is for the teleop dashboard, which Reward Studio serves: RLinf's own
# ResNetRewardModel has no crop, so its pages flag it as served only (training.resnet.rlinf_match); the
# training page's "PickCube" preset trains on the whole frame, which RLinf's class scores as we do.
model_input_size = workspace_input_size


# About every other labeled frame of each episode (neighbours are near copies; this halves the CPU time),
# the fail frames not thinned: those just before the lift (the cube grasped, still on the table) are the
# ones a reward must not fire on. A quarter of the episodes is held out (12 of the default 48): the
# threshold is picked on them, and with fewer a single odd start position swings it.
FRAMES_PER_EPISODE = 48
SNAPSHOT_OPTIONS = {
    "sources": ["human"], "camera": CAMERA, "val_split": 0.25, "num_samples_per_episode": FRAMES_PER_EPISODE,
    "fail_success_ratio": 1000.0, "trend": False, "png_folders": False,
}  # fmt: skip


class DemoError(RuntimeError):
    """A demo step that cannot go on; the message says which and why."""


@dataclass(frozen=True)
class TrainedDemo:
    model: TrainedModel
    snapshot: DatasetSnapshot
    val_accuracy: float  # at the trainer's 0.5
    threshold: float  # picked from validation
    val_accuracy_at_threshold: float
    val_frames: int


def demo_project_prepare(*, name: str, episodes: int, size: int, first_seed: int, stdout: Writer) -> Project:
    """The project holding the demo's episodes (rendered once into DEMO_CACHE_DIR, shared with the run
    command's demo project), their frames labeled success once the cube is held up (`webapp.demo.lift`)."""
    project, _ = Project.objects.get_or_create(
        name=name, defaults={"task_description": DEMO_TASK, "camera_views": ["main", "extra"]}
    )
    if not {"main", "extra"} <= set(project.camera_views):
        raise DemoError(f"project {project.name!r} needs cameras main and extra, has {project.camera_views}")
    # one snapshot of mixed sizes would be resized, not cropped, to the model's input
    stored = stored_frame_width(project=project, camera=CAMERA)
    if stored is not None and stored != size:
        raise DemoError(
            f"project {project.name!r} holds episodes rendered at {stored} px, not {size} px: "
            "pass --size to match them or --project for a new project"
        )
    stdout.write(f"PickCube episodes: {episodes} from seed {first_seed} ({size} px, cached in DEMO_CACHE_DIR)\n")
    t0 = time.monotonic()
    rendered = demo_episodes(episodes, size=size, first_seed=first_seed, progress=progress_bar(stdout))
    t1 = time.monotonic()
    added = seed_pickcube_episodes(project=project, episodes=rendered, labels=LIFTED)
    stored = project.episodes.count()
    stdout.write(
        f"stored {added} new episodes in {project.name!r} ({stored} in all), labeled by the lift "
        f"(rendered or read in {t1 - t0:.0f} s, stored in {time.monotonic() - t1:.0f} s)\n"
    )
    return project


def demo_model_train(*, project: Project, size: int, epochs: int, lr: float, stdout: Writer) -> TrainedDemo:
    """A snapshot of the project's labels (main camera, every other labeled frame), a ResNet18 trained from scratch
    in this process on the camera's workspace at the camera's resolution (a cosine-decayed learning rate, the
    last epoch's weights; recomputing their BatchNorm statistics made early rewards more frequent), and the
    threshold with the best balanced accuracy on its validation episodes."""
    from training.evaluation.model_evaluation import model_predictions
    from training.models import TrainedModel
    from training.services import job_create, job_execute
    from training.snapshots.services import snapshot_create

    snapshot = snapshot_create(project=project, options=SNAPSHOT_OPTIONS)
    if snapshot.status != "ready":
        raise DemoError(f"snapshot #{snapshot.number} failed: {snapshot.error}")
    stdout.write(f"dataset snapshot #{snapshot.number}: {snapshot.stats}\n")
    side = model_input_size(size)
    config = {
        "image_size": [3, side, side], "crop": WORKSPACE_CROP, "epochs": epochs, "batch_size": 32, "lr": lr,
        "warmup_steps": 20, "schedule": "cosine", "select": "last", "bn_recalibrate": False, "patience": 0,
        "pretrained": False, "hidden_dim": 256, "dropout": 0.1, "device": "cpu",
        "crop_padding": max(1, size // 16),  # shifts of up to 1/16 of the frame, as 4 px at 64 px
    }  # fmt: skip
    job = job_create(
        project=project, snapshot=snapshot, kind="resnet", config=config, enqueue=False,
        name="demo: ResNet on lifted-cube labels",
    )  # fmt: skip
    stdout.write(f"training job {job.pk} ({epochs} epochs on the CPU)...\n")
    t0 = time.monotonic()
    status = job_execute(job_id=job.pk, worker="manage.py demo")
    job.refresh_from_db()
    if status != "succeeded":
        raise DemoError(f"training job {job.pk} {status}: {job.error[-2000:]}")
    model = TrainedModel.objects.get(job=job)
    stdout.write(f"trained in {time.monotonic() - t0:.0f} s\n")
    probs, labels = model_predictions(model=model, snapshot=snapshot)
    threshold = pick_threshold(probs, labels)
    return TrainedDemo(
        model=model,
        snapshot=snapshot,
        val_accuracy=accuracy_at(probs, labels, 0.5),
        threshold=threshold,
        val_accuracy_at_threshold=accuracy_at(probs, labels, threshold),
        val_frames=len(labels),
    )


def demo_deploy(*, model: TrainedModel, name: str, threshold: float) -> Deployment:
    """Create the deployment or switch it to the new model, at the picked threshold."""
    from inference.models import Deployment
    from inference.services import deployment_create, deployment_update

    existing = Deployment.objects.filter(name=name).first()
    if existing:
        return deployment_update(deployment=existing, trained_model=model, threshold=threshold)
    return deployment_create(name=name, trained_model=model, threshold=threshold)


def demo_live_check(
    *, deployment: Deployment, seeds: list[int], size: int, stdout: Writer, workers: int | None = None
) -> list[SeedCheck]:
    """The scripted policy plays each new seed in ManiSkill (`workers` processes side by side, default one per
    CPU, into a temporary folder: nothing is cached); every frame of the deployment's camera is scored by its
    model loaded as the inference worker loads it; the first step above the threshold is compared with the
    first step the env state shows the cube lifted."""
    from inference.rewards import result_parts
    from training.families import scorer_load
    from training.kit.family_parts import ModelSpec
    from training.storage import local_path

    trained = deployment.trained_model
    scorer = scorer_load(
        ModelSpec(kind=trained.kind, folder=local_path(trained.checkpoint_path), config=trained.config)
    )
    plan = [(seed, False) for seed in seeds]
    checks = []
    with tempfile.TemporaryDirectory(prefix="demo-live-") as folder:
        render_missing(
            Path(folder), plan, size=size, workers=workers or render_workers(len(plan)), progress=progress_bar(stdout)
        )
        for seed, _ in plan:
            played = episode_load(cache_path(Path(folder), seed, False, size), seed, False)
            probs = [result_parts(r)[0] for r in scorer.score(played.images[CAMERA])]
            checks.append(seed_check(seed, probs, deployment.threshold, played.lift_step))
    return checks


# What the demo's own commands do with its token: the printed robot_agent run records episodes (ingest), streams
# a live session (teleop) and scores it (rewards); an RL worker asks for rewards. Nothing else, and only there.
DEMO_AGENT_NAME = "demo-agent"
DEMO_AGENT_SCOPES = ["ingest", "teleop", "rewards"]


def demo_agent_token(*, project: Project, token_file: Path) -> Path:
    """The demo agent's token file, the token limited to DEMO_AGENT_SCOPES on `project` (and its deployments).

    A token that matches this database's demo agent is kept (its grants narrowed to this project); otherwise
    a new one is written, so the printed command always works against this database."""
    from projects.models import Agent
    from projects.services import agent_create, agent_rotate_token
    from projects.tokens import hash_token

    token = token_file.read_text().strip() if token_file.exists() else ""
    agent = Agent.objects.filter(name=DEMO_AGENT_NAME).first()
    if agent is None:
        agent, token = agent_create(
            name=DEMO_AGENT_NAME, kind=Agent.Kind.SIM, scopes=DEMO_AGENT_SCOPES, projects=[project]
        )
    elif not token or agent.token_hash != hash_token(token):
        token = agent_rotate_token(agent=agent)
    else:
        token = ""  # the file is right as it is
    Agent.objects.filter(pk=agent.pk).update(scopes=DEMO_AGENT_SCOPES, all_projects=False)
    agent.projects.set([project])
    agent.deployments.clear()
    if token:
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.write_text(token)
        token_file.chmod(0o600)
    return token_file
