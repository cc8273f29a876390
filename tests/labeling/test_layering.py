"""Labeling sits below training and inference: no labeling module imports either (the demo files,
moving to webapp/, aside). The effective-label rule and the default prompt live here for them to use."""

from __future__ import annotations

import ast
from pathlib import Path

import labeling

ROOT = Path(labeling.__file__).parent
DEMO = {"demo_data.py", "demo_pickcube.py", "management/commands/demo.py"}


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_labeling_module_imports_training_or_inference():
    offenders = {}
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in DEMO or relative.startswith("migrations/"):
            continue
        upward = sorted(n for n in _imported(path) if n.split(".")[0] in ("training", "inference"))
        if upward:
            offenders[relative] = upward
    assert offenders == {}


def test_the_project_default_prompt_is_the_one_training_renders():
    from labeling.models import Project
    from labeling.prompts import DEFAULT_PROMPT_TEMPLATE
    from training.vlm.prompt import prompt_render

    assert Project._meta.get_field("prompt_template").default == DEFAULT_PROMPT_TEMPLATE
    assert prompt_render(None, task="pick the cube", window_size=5) == DEFAULT_PROMPT_TEMPLATE.format(
        task="pick the cube", window_size=5
    )
