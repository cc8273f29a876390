"""manage.py export_lerobot --project NAME OUT: the project's episodes and labels as a LeRobot dataset folder."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.imports.lerobot.export import ExportError, lerobot_export
from labeling.management.commands.import_episodes import _project


class Command(BaseCommand):
    help = (
        "Write a project's finished episodes as a LeRobot dataset (v3.0 layout: parquet and one H.264 mp4 per "
        "camera and episode) with its frame labels as `label`, `next.success` and `next.reward` columns."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("out", type=Path, metavar="OUT", help="A folder that does not exist yet.")
        parser.add_argument("--project", required=True, help="Project name (or id).")
        parser.add_argument("--fps", type=int, default=10, help="Frame rate written to the dataset (default 10).")
        parser.add_argument(
            "--max-frames",
            type=int,
            default=None,
            help="Refuse a project with more steps (default: LEROBOT_EXPORT_MAX_FRAMES).",
        )

    def handle(self, *args, out: Path, project: str, fps: int, max_frames: int | None, **options) -> None:
        if out.exists():
            raise CommandError(f"{out} exists; name a folder that does not")
        if not 1 <= fps <= 240:
            raise CommandError("--fps must be from 1 to 240")
        limit = max_frames or settings.LEROBOT_EXPORT_MAX_FRAMES
        try:
            info = lerobot_export(project=_project(project), root=out, max_frames=limit, fps=fps)
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Wrote {info['total_episodes']} episode(s), {info['total_frames']} frame(s) to {out}")
