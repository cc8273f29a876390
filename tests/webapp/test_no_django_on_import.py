"""A module whose docstring says it needs no Django imports without Django settings configured: no settings
read, no app registry, no Celery app built from settings (robots, RL machines and the inference worker's hot
loop import them, and their tests run them without a database)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "projects", "labeling", "webhooks", "training", "inference", "webapp", "robot_agent")
SAYS_NO_DJANGO = re.compile(r"\bno django\b|\bwithout django\b|\bdjango-free\b", re.IGNORECASE)

# Imports each module in turn in one interpreter and names every one whose import fails without settings, and the
# first after which Django's settings are configured (past it the check would prove nothing).
PROBE = """
import importlib, sys
from django.conf import settings
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: import failed without Django settings: {type(exc).__name__}: {str(exc)[:80]}")
    if settings.configured:
        failed.append(f"{name}: importing it configured Django's settings")
        break
if failed:
    sys.exit("\\n".join(failed))
print("ok", len(sys.argv) - 1)
"""


def modules_saying_no_django() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            if SAYS_NO_DJANGO.search(docstring):
                parts = list(path.relative_to(ROOT).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                found.append(".".join(parts))
    return found


def test_the_finder_sees_the_broker_and_the_ground_floor():
    found = modules_saying_no_django()
    assert {"inference.broker", "inference.workers.loop", "common.json_limits"} <= set(found)


def test_modules_that_say_they_need_no_django_import_without_settings():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    modules = modules_saying_no_django()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", str(len(modules))]
