"""manage.py import_episodes --project NAME PATH...: import RLinf pickles, .pt payloads, image folders, LeRobot
datasets and mp4 videos."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from labeling.imports.services import import_paths
from labeling.imports.sources import SourceError
from projects.models import Project


class Command(BaseCommand):
    help = (
        "Import existing data into a project: RLinf episode pickles (*.pkl), RLinf reward datasets "
        "(train.pt / val.pt), folders with success/ and failure/ images, LeRobot dataset folders, mp4 videos "
        "(NAME.mp4 or NAME.<camera>.mp4), zips of these, or folders "
        "holding any of them. Re-importing the same file changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
        parser.add_argument("--project", required=True, help="Project name (or id).")
        parser.add_argument("--env-id", default="", help="Env id (e.g. PickCube-v1) for files that name none.")
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")

    def handle(self, *args, paths: list[Path], project: str, env_id: str, no_progress: bool, **options) -> None:
        target = _project(project)
        bars: list[tqdm] = []

        def on_sources(count: int) -> None:
            bars.append(tqdm(total=count, unit="file", desc="Importing", file=sys.stderr, disable=no_progress))

        def on_progress(source) -> None:
            bars[0].set_postfix_str(source.name[-40:], refresh=False)
            bars[0].update(1)

        try:
            summary = import_paths(
                project=target, paths=paths, env_id=env_id, on_sources=on_sources, on_progress=on_progress
            )
        except SourceError as exc:
            raise CommandError(str(exc)) from None
        finally:
            for bar in bars:
                bar.close()
        for line in summary.lines():
            self.stdout.write(line)
        if summary.failed:
            raise CommandError(f"{len(summary.failed)} file(s) could not be imported; reasons above.")


def _project(name: str) -> Project:
    project = Project.objects.filter(name=name).first()
    if project is None and name.isdigit():
        project = Project.objects.filter(pk=int(name)).first()
    if project is None:
        names = ", ".join(Project.objects.values_list("name", flat=True)[:20]) or "none yet"
        raise CommandError(f"no project named {name!r}; existing projects: {names}")
    return project
