"""`manage.py demo`: scripted PickCube episodes -> accepted env-success labels -> a ResNet trained on the CPU
-> deployed, so the teleop dashboard shows a real model's probability rising as the cube is lifted.

Idempotent: episodes already collected (same seeds) are kept; a new training job and model are made each
run and the deployment is switched to the new model.
"""

from __future__ import annotations

import time
import uuid

import numpy as np
from django.core.management.base import BaseCommand, CommandError

from labeling.access import ALL_SCOPES
from labeling.images import encode_array
from labeling.models import Agent, Episode, Project
from labeling.services import StepInput, agent_create, episode_create, episode_finish, steps_append
from webapp.addresses import app_url

DEMO_NAMESPACE = uuid.UUID("0d2c6f0e-6a55-4c8e-a0f5-7b1f3c1f7a21")


class Command(BaseCommand):
    requires_system_checks: list = []  # runs even while another app's URLs are mid-edit
    help = "Collect scripted PickCube episodes, label them from env success, train a ResNet on the CPU, deploy it."

    def add_arguments(self, parser):
        parser.add_argument("--episodes", type=int, default=30)
        parser.add_argument("--project", default="PickCube")
        parser.add_argument("--deployment", default="pickcube-resnet")
        parser.add_argument("--size", type=int, default=64, help="camera size in pixels (and the model's input)")
        parser.add_argument("--epochs", type=int, default=6)
        parser.add_argument("--lr", type=float, default=3e-4)
        parser.add_argument("--seed", type=int, default=1000, help="first episode seed")
        parser.add_argument(
            "--eval-seeds",
            type=int,
            default=10,
            help="new seeds the scripted policy plays while the model scores every frame (0: skip)",
        )

    def handle(self, *args, **opts):
        started = time.monotonic()
        project, _ = Project.objects.get_or_create(
            name=opts["project"],
            defaults={
                "task_description": "Pick up the red cube and lift it to the goal.",
                "camera_views": ["main", "extra"],
            },
        )
        if not {"main", "extra"} <= set(project.camera_views):
            raise CommandError(f"project {project.name!r} needs cameras main and extra, has {project.camera_views}")
        episodes = self.collect(project, opts)
        self.label(project, episodes)
        model = self.train(project, opts)
        deployment = self.deploy(model, opts)
        figures = self.evaluate_live(model, deployment.threshold, opts) if opts["eval_seeds"] > 0 else ""
        token_file = self.agent_token_file()
        self.stdout.write(self.style.SUCCESS(f"demo ready in {time.monotonic() - started:.0f} s"))
        val_acc = (model.metrics or {}).get("val_acc")
        if val_acc is not None:
            self.stdout.write(f"validation accuracy: {val_acc:.3f}")
        if figures:
            self.stdout.write(figures)
        self.stdout.write(
            "Start the server and an inference worker (the README's run command does both), then:\n"
            f'  .venv/bin/python -m robot_agent run --server {app_url("")} --token "$(cat {token_file})" '
            f"--project {project.name!r} --deployment {deployment.name} --robot maniskill --policy scripted "
            f"--hz 10 --episodes 3 --width {opts['size']} --height {opts['size']} --stop-after-success 10\n"
            f"and open {app_url('/teleop/')} to watch the probability rise as the cube is lifted."
        )

    # -- steps ----------------------------------------------------------------------------------
    def collect(self, project: Project, opts) -> list[Episode]:
        from robot_agent.collect import collect_scripted

        seeds = [opts["seed"] + i for i in range(opts["episodes"])]
        ids = {seed: uuid.uuid5(DEMO_NAMESPACE, f"{project.pk}/{seed}/{opts['size']}") for seed in seeds}
        have = set(Episode.objects.filter(uuid__in=ids.values()).values_list("uuid", flat=True))
        todo = [seed for seed in seeds if ids[seed] not in have]
        self.stdout.write(f"collecting {len(todo)} scripted PickCube episodes ({len(have)} already stored)")
        for number, collected in enumerate(collect_scripted(todo, size=opts["size"]), start=1):
            t0 = time.monotonic()
            rows = []
            for index, obs in enumerate(collected.observations):
                action = collected.actions[index - 1].tolist() if index else []
                images = {
                    camera: encode_array(image, max_side=4096, max_pixels=1 << 24)
                    for camera, image in obs.images.items()
                }
                rows.append(
                    StepInput(index=index, action=action, reward=obs.reward, terminated=obs.terminated,
                              truncated=obs.truncated, success=obs.success, info=obs.info, images=images)
                )  # fmt: skip
            episode, _ = episode_create(
                project=project, uuid=ids[collected.seed], source=Episode.Source.SIM, env_id="PickCube-v1",
                metadata={"seed": collected.seed, "policy": "scripted", "demo": True},
            )  # fmt: skip
            steps_append(episode=episode, steps=rows)
            episode_finish(episode=episode)
            self.stdout.write(
                f"  episode {number}/{len(todo)} seed {collected.seed}: {len(rows)} steps, "
                f"first success at step {collected.first_success} ({time.monotonic() - t0:.1f} s to store)"
            )
        return list(Episode.objects.filter(uuid__in=ids.values()))

    def label(self, project: Project, episodes: list[Episode]) -> None:
        from labeling.label_services import Actor
        from labeling.proposals import proposals_accept, proposals_generate

        ids = [e.pk for e in episodes]
        generated = proposals_generate(project=project, episodes=Episode.objects.filter(pk__in=ids))
        accepted = 0
        for episode in episodes:
            accepted += proposals_accept(project=project, kind="frame", actor=Actor(), episode=episode).frames
        self.stdout.write(f"env-success proposals: {generated.frames_created} new, {accepted} accepted as labels")

    def train(self, project: Project, opts):
        from training.models import TrainedModel
        from training.services import job_create, job_execute
        from training.snapshot_services import snapshot_create

        snapshot = snapshot_create(project=project, options={"sources": ["human"], "camera": "main"})
        if snapshot.status != "ready":
            raise CommandError(f"snapshot #{snapshot.number} failed: {snapshot.error}")
        self.stdout.write(f"dataset snapshot #{snapshot.number}: {snapshot.stats}")
        size = opts["size"]
        config = {
            "image_size": [3, size, size], "epochs": opts["epochs"], "batch_size": 32, "lr": opts["lr"],
            "warmup_steps": 20, "pretrained": False, "hidden_dim": 256, "dropout": 0.1, "device": "cpu",
        }  # fmt: skip
        job = job_create(project=project, snapshot=snapshot, kind="resnet", config=config, enqueue=False,
                         name="demo: ResNet on env-success labels")  # fmt: skip
        self.stdout.write(f"training job {job.pk} ({opts['epochs']} epochs on the CPU)...")
        t0 = time.monotonic()
        status = job_execute(job_id=job.pk, worker="manage.py demo")
        job.refresh_from_db()
        if status != "succeeded":
            raise CommandError(f"training job {job.pk} {status}: {job.error[-2000:]}")
        model = TrainedModel.objects.get(job=job)
        metrics = {k: round(v, 4) if isinstance(v, float) else v for k, v in (model.metrics or {}).items()}
        self.stdout.write(f"trained in {time.monotonic() - t0:.0f} s: {metrics}")
        return model

    def evaluate_live(self, model, threshold: float, opts) -> str:
        """Play the scripted policy on new seeds, score every main-camera frame with the trained model as it
        comes (in this process), and count the seeds where p(success) stays at or below the threshold until
        the env reports the cube lifted to the goal, and rises above it after."""
        from robot_agent.collect import collect_scripted
        from training.resnet.checkpoint import load_checkpoint
        from training.resnet.model import predict_proba
        from training.storage import local_path

        net, _ = load_checkpoint(local_path(model.checkpoint_path))
        seeds = [opts["seed"] + 10_000 + i for i in range(opts["eval_seeds"])]
        self.stdout.write(f"live check on {len(seeds)} new seeds (threshold {threshold})...")
        good = 0
        for collected in collect_scripted(seeds, size=opts["size"]):
            p = predict_proba(net, np.stack([o.images["main"] for o in collected.observations]))
            lifted = collected.first_success
            crossed = next((i for i, v in enumerate(p) if v > threshold), None)
            ok = lifted is not None and crossed is not None and crossed >= lifted
            good += ok
            self.stdout.write(
                f"  seed {collected.seed}: lifted at step {lifted}, first crossing at step {crossed} "
                f"({'ok' if ok else 'early' if crossed is not None and lifted is not None else 'missed'})"
            )
        return f"crossed the threshold only once the cube was lifted on {good} of {len(seeds)} seeds"

    def deploy(self, model, opts):
        from inference.models import Deployment
        from inference.services import deployment_create, deployment_update

        existing = Deployment.objects.filter(name=opts["deployment"]).first()
        if existing:
            deployment = deployment_update(deployment=existing, trained_model=model)
        else:
            deployment = deployment_create(name=opts["deployment"], trained_model=model, threshold=0.5)
        self.stdout.write(f"deployed {model.name!r} as {deployment.name!r} (version {deployment.version})")
        return deployment

    def agent_token_file(self):
        """The demo agent's token file (shared with setup_demo); a token that does not match this database's
        demo agent is replaced, so the printed command always works against this database."""
        from django.conf import settings

        from labeling.services import agent_rotate_token
        from labeling.tokens import hash_token

        token_file = settings.DATA_DIR / "demo_agent_token.txt"
        token = token_file.read_text().strip() if token_file.exists() else ""
        agent = Agent.objects.filter(name="demo-agent").first()
        if agent is not None and token and agent.token_hash == hash_token(token):
            return token_file
        if agent is not None:
            token = agent_rotate_token(agent=agent)
        else:
            _, token = agent_create(
                name="demo-agent", kind=Agent.Kind.SIM, scopes=ALL_SCOPES, all_projects=True
            )  # the demo's one token serves the robot agent and RL workers alike
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.write_text(token)
        token_file.chmod(0o600)
        return token_file
