"""Export a numbered dataset snapshot of a project's labels (and optionally copy its archive somewhere)."""

from __future__ import annotations

import json
import shutil

from django.core.management.base import BaseCommand, CommandError

from projects.models import Project
from training.snapshots.services import SnapshotError, snapshot_archive, snapshot_create
from training.storage import local_path


class Command(BaseCommand):
    help = "Write a dataset snapshot (RLinf train.pt/val.pt, VLM trend dataset, PNG folders) of a project."

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="Project name.")
        parser.add_argument("--sources", default="human", help="Comma-separated label sources: human,proposal,model.")
        parser.add_argument("--camera", default="", help="Camera of the binary dataset (default: the first).")
        parser.add_argument("--num-samples-per-episode", type=int, default=0)
        parser.add_argument("--no-keep-last-frame", action="store_true")
        parser.add_argument("--val-split", type=float, default=0.2)
        parser.add_argument("--fail-success-ratio", type=float, default=2.0)
        parser.add_argument("--seed", type=int, default=42)
        parser.add_argument("--no-trend", action="store_true", help="Skip the VLM trend dataset.")
        parser.add_argument("--trend-val-split", type=float, default=0.1)
        parser.add_argument(
            "--split",
            default="auto",
            choices=["auto", "episode", "frame"],
            help="Train/val split: by episode (RLinf simulation), by frame (RLinf real-world), or auto.",
        )
        parser.add_argument("--no-trend-balance", action="store_true", help="Keep the trend label distribution.")
        parser.add_argument(
            "--no-trend-reverse-augmentation", action="store_true", help="No reversed positives as negatives."
        )
        parser.add_argument("--no-png", action="store_true", help="Skip the success/ and failure/ PNG folders.")
        parser.add_argument("--archive", default="", help="Also copy a .zip of the snapshot to this path.")

    def handle(self, *args, **o):
        project = Project.objects.filter(name=o["project"]).first()
        if project is None:
            raise CommandError(f"no project named {o['project']!r}")
        options = {
            "sources": [s.strip() for s in o["sources"].split(",") if s.strip()],
            "camera": o["camera"],
            "num_samples_per_episode": o["num_samples_per_episode"],
            "keep_last_frame": not o["no_keep_last_frame"],
            "val_split": o["val_split"],
            "fail_success_ratio": o["fail_success_ratio"],
            "seed": o["seed"],
            "trend": not o["no_trend"],
            "trend_val_split": o["trend_val_split"],
            "split": o["split"],
            "trend_balance": not o["no_trend_balance"],
            "trend_reverse_augmentation": not o["no_trend_reverse_augmentation"],
            "png_folders": not o["no_png"],
        }
        try:
            snapshot = snapshot_create(project=project, options=options)
        except (SnapshotError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        if snapshot.status != "ready":
            raise CommandError(f"snapshot #{snapshot.number} failed: {snapshot.error}")
        self.stdout.write(f"snapshot #{snapshot.number} of {project.name}: {local_path(snapshot.folder)}")
        self.stdout.write(json.dumps({k: snapshot.stats[k] for k in ("train", "val", "episodes")}))
        if o["archive"]:
            shutil.copyfile(snapshot_archive(snapshot=snapshot), o["archive"])
            self.stdout.write(f"archive: {o['archive']}")
