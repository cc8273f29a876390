"""Queue (or run here with --inline) a ResNet training job on a project's snapshot."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from projects.models import Project
from training.models import DatasetSnapshot, TrainedModel, TrainingJob
from training.resnet.config import ResNetConfig
from training.services import job_create, job_execute
from training.storage import local_path

OVERRIDES = {
    "epochs": int,
    "batch_size": int,
    "lr": float,
    "hidden_dim": int,
    "image_size": int,
    "seed": int,
    "warmup_steps": int,
    "patience": int,
    "num_threads": int,
    "device": str,
    "arch": str,
    "pretrained_path": str,
    "processes": int,
    "nodes": int,
    "master_addr": str,
    "master_port": int,
}


class Command(BaseCommand):
    help = "Train a ResNet reward model on a snapshot: queue a job for the training workers, or --inline."

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True)
        parser.add_argument("--snapshot", type=int, required=True, help="Snapshot number within the project.")
        parser.add_argument("--inline", action="store_true", help="Run in this process instead of queueing.")
        parser.add_argument("--config", default="", help="JSON object of ResNetConfig fields.")
        for name, kind in OVERRIDES.items():
            parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None)

    def handle(self, *args, **o):
        project = Project.objects.filter(name=o["project"]).first()
        if project is None:
            raise CommandError(f"no project named {o['project']!r}")
        snapshot = DatasetSnapshot.objects.filter(project=project, number=o["snapshot"]).first()
        if snapshot is None:
            raise CommandError(f"{project.name} has no snapshot #{o['snapshot']}")
        try:
            config = json.loads(o["config"]) if o["config"] else {}
        except json.JSONDecodeError as exc:
            raise CommandError(f"--config is not JSON: {exc}") from None
        for name in OVERRIDES:
            if o.get(name) is not None:
                config[name] = o[name]
        if isinstance(config.get("image_size"), int):
            config["image_size"] = [3, config["image_size"], config["image_size"]]
        if config.get("pretrained_path"):
            config["pretrained"] = True
        try:
            ResNetConfig.from_dict(config)
            with transaction.atomic():
                job = job_create(project=project, snapshot=snapshot, config=config, enqueue=not o["inline"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if not o["inline"]:
            self.stdout.write(f"job {job.pk} queued on the training queue")
            return
        result = job_execute(job_id=job.pk)
        job = TrainingJob.objects.get(pk=job.pk)
        self.stdout.write(job.log)
        if result != "succeeded":
            raise CommandError(f"job {job.pk} {result}: {job.error}")
        model = TrainedModel.objects.get(job=job)
        self.stdout.write(f"model {model.pk}: {local_path(model.checkpoint_path)} {json.dumps(job.summary)}")
