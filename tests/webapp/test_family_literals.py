"""A new model family is a folder and one entry in `training.families`: no package outside `training/` names a
family by its string. Inference asks the registry what a kind does (`takes_windows`, `evaluation_page`) or
names the Django choice (`ModelKind.VLM`); a `"vlm"` anywhere else is a branch the next family would miss.

String constants are read with `ast` (docstrings and comments say "VLM" freely; an f-string's text parts are
constants too). Migrations keep the values they were written with.

`reward_client` is left out on purpose: it runs on RL machines without the server, and RLinf's `history_vlm`
plugin checks the kind a deployment reports over the wire (`kind_checked(..., "vlm", ...)`): that string is
the protocol, not a branch on the registry.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The server packages (those that exist: some are being moved out of labeling) and the robot's client.
PACKAGES = ("webapp", "labeling", "inference", "webhooks", "projects", "common", "robot_agent")
FAMILY_STRINGS = {"vlm"}


def package_modules() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.relative_to(ROOT).parts:
                yield path


def family_literals(path: Path) -> Iterator[int]:
    """The lines of `path` holding a string constant equal to a family's kind."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FAMILY_STRINGS:
            yield node.lineno


def test_the_scan_sees_the_packages():
    assert (ROOT / "inference").is_dir() and any(package_modules())


def test_no_family_kind_is_named_by_its_string_outside_training():
    found = [f"{path.relative_to(ROOT)}:{line}" for path in package_modules() for line in family_literals(path)]
    assert not found, (
        "these name a model family by its string; ask `training.families` (e.g. `takes_windows(kind)`) or use "
        f"`ModelKind.VLM`: {', '.join(found)}"
    )
