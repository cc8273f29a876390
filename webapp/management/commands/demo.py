"""`manage.py demo`: the demo's PickCube episodes (rendered once, cached) labeled by the lift -> a ResNet
trained on the CPU -> deployed at the threshold picked from validation -> a live check on new seeds, so the
teleop dashboard shows a real model's probability rising as the cube is lifted. The figures are printed
at the end: validation accuracy, the first crossing against the lift per seed, wall time.

Idempotent: episodes already stored (same seeds) are kept; a new training job and model are made each
run and the deployment is switched to the new model.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.addresses import app_url
from webapp.demo.episode_cache import FIRST_SEED
from webapp.demo.report import live_lines
from webapp.demo.services import (
    DemoError,
    demo_agent_token,
    demo_deploy,
    demo_live_check,
    demo_model_train,
    demo_project_prepare,
)


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # runs even while another app's URLs are mid-edit
    help = "Train a ResNet on the demo's PickCube episodes on the CPU, deploy it, check it live on new seeds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--episodes", type=int, default=48, help="PickCube episodes (every third fails; rendered in parallel)"
        )
        parser.add_argument("--project", default="PickCube")
        parser.add_argument("--deployment", default="pickcube-resnet")
        parser.add_argument(
            "--size",
            type=int,
            default=128,
            help="camera size in pixels the episodes are rendered at (the model sees the workspace crop, half as wide)",
        )
        parser.add_argument("--epochs", type=int, default=8)
        parser.add_argument("--lr", type=float, default=1e-3)
        parser.add_argument("--seed", type=int, default=FIRST_SEED, help="first episode seed")
        parser.add_argument(
            "--eval-seeds",
            type=int,
            default=10,
            help="new seeds the scripted policy plays while the model scores every frame (0: skip)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        started = time.monotonic()
        try:
            project = demo_project_prepare(
                name=opts["project"], episodes=opts["episodes"], size=opts["size"], first_seed=opts["seed"],
                stdout=self.stdout,
            )  # fmt: skip
            trained = demo_model_train(
                project=project, size=opts["size"], epochs=opts["epochs"], lr=opts["lr"], stdout=self.stdout
            )
            deployment = demo_deploy(model=trained.model, name=opts["deployment"], threshold=trained.threshold)
            self.stdout.write(
                f"deployed {trained.model.name!r} as {deployment.name!r} (version {deployment.version}, "
                f"threshold {deployment.threshold:.2f})"
            )
            checks = []
            if opts["eval_seeds"] > 0:
                seeds = [opts["seed"] + 10_000 + i for i in range(opts["eval_seeds"])]
                self.stdout.write(f"live check on {len(seeds)} new seeds...")
                t0 = time.monotonic()
                checks = demo_live_check(deployment=deployment, seeds=seeds, size=opts["size"], stdout=self.stdout)
                self.stdout.write(f"played and scored in {time.monotonic() - t0:.0f} s")
        except DemoError as exc:
            raise CommandError(str(exc)) from None
        token_file = self.agent_token_file(project)
        self.stdout.write(
            "Start the server and an inference worker (the README's run command does both), then:\n"
            f'  .venv/bin/python -m robot_agent run --server {app_url("")} --token "$(cat {token_file})" '
            f"--project {project.name!r} --deployment {deployment.name} --robot maniskill --policy scripted "
            f"--hz 10 --episodes 3 --width {opts['size']} --height {opts['size']} --stop-after-success 10\n"
            f"and open {app_url('/teleop/')} to watch the probability rise as the cube is lifted."
        )
        self.stdout.write(self.style.SUCCESS(f"demo ready in {time.monotonic() - started:.0f} s"))
        self.stdout.write(
            f"validation accuracy: {trained.val_accuracy:.3f} at 0.5, {trained.val_accuracy_at_threshold:.3f} at "
            f"the deployment threshold {trained.threshold:.2f} ({trained.val_frames} frames of held-out episodes)"
        )
        for line in live_lines(checks, trained.threshold) if checks else []:
            self.stdout.write(line)
        self.stdout.write(f"wall time: {time.monotonic() - started:.0f} s")

    def agent_token_file(self, project) -> Path:
        """The demo agent's token file (shared with setup_demo), its token limited to the demo project."""
        from django.conf import settings

        return demo_agent_token(project=project, token_file=settings.DATA_DIR / "demo_agent_token.txt")
