"""Each app's root stays small enough to read: about 20 modules at most, and no prefix shared by three modules
(`import_*`, `monitor_*`): three are a room asking to be made, a folder with the usual file roles."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("common", "projects", "webapp", "labeling", "training", "inference", "webhooks", "robot_agent", "reward_client")
MAX_ROOT_MODULES = 20
WIDER: dict[str, int] = {}  # roots allowed above the limit for now (none): they may only shrink


def root_modules(app: str) -> list[str]:
    return sorted(path.stem for path in (ROOT / app).glob("*.py") if path.name != "__init__.py")


def test_no_app_root_holds_more_than_about_twenty_modules():
    sizes = {app: len(root_modules(app)) for app in APPS}
    over = {app: n for app, n in sizes.items() if n > WIDER.get(app, MAX_ROOT_MODULES)}
    assert not over, f"make a room (a folder) of the modules that belong together: {over}"
    shrunk = {app: sizes[app] for app, limit in WIDER.items() if sizes[app] <= MAX_ROOT_MODULES}
    assert not shrunk, f"back within {MAX_ROOT_MODULES}: delete from WIDER: {shrunk}"


def test_no_prefix_family_of_three_at_an_app_root():
    families = {
        f"{app}/{prefix}_*": count
        for app in APPS
        for prefix, count in Counter(name.split("_")[0] for name in root_modules(app) if "_" in name).items()
        if count > 2
    }
    assert not families, f"make each a room: {families}"
