"""The packages stack up in floors with no arrow running back up: a package imports nothing from the floors
built on it, and no two modules import each other at import time.

Floors, bottom up: `common` (the plumbing: no app), `projects` (projects, people, agents, tokens, the access
rules and the agent gate), then `labeling` and `webhooks`, `training`, `inference`, and `webapp`, which only
composes them (settings, ASGI, URLs, Celery, the demo). The client packages (robot_agent, reward_client) import
no server package at all, the ground floor included.

Imports are read with `ast` from every module of the repository (migrations aside), including imports inside
functions and `importlib.import_module("...")` with a literal name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("common", "projects", "webapp", "labeling", "training", "inference", "robot_agent", "reward_client", "webhooks")
SERVER = {"common", "projects", "webapp", "labeling", "training", "inference", "webhooks"}

COMMON = "common"  # the ground floor, below every app

# package -> the packages it must not import (those on the floors above it).
FORBIDDEN: dict[str, set[str]] = {
    COMMON: SERVER - {COMMON} | {"robot_agent", "reward_client"},
    "projects": {"labeling", "webhooks", "training", "inference", "webapp"},
    "labeling": {"webapp", "training", "inference", "webhooks"},
    "webhooks": {"webapp", "training", "inference"},
    "training": {"webapp", "inference"},
    "inference": {"webapp"},
    # The client packages run on robots and RL machines, installed without the server.
    "robot_agent": SERVER,
    "reward_client": SERVER,
}


def layer(module: str) -> str:
    """`common` for the ground floor, else the top-level package."""
    return COMMON if module == COMMON or module.startswith(f"{COMMON}.") else module.split(".")[0]


# Cycles tolerated for now (none): an entry must name a cycle that still exists, so none stays allowed by
# accident.
KNOWN_CYCLES: set[frozenset[str]] = set()


def app_modules(app: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / app).rglob("*.py")):
        if {"migrations", "build"} & set(path.relative_to(ROOT).parts):  # `build`: pip's copy of reward_client
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (imports for the type checker, never run)."""
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
        for child in node.body
        for inner in ast.walk(child)
    }


def imports_of(
    module: str, path: Path, *, top_level_only: bool = False, runtime_only: bool = False
) -> Iterator[tuple[str, int]]:
    """(imported module, line) for each import; relative imports resolved against `module`. `runtime_only`
    leaves out the imports under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes = tree.body if top_level_only else ast.walk(tree)
    skipped = type_checking_only(tree) if runtime_only else set()
    for node in nodes:
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, node.lineno
            for alias in node.names:  # `from . import services` imports a module too
                yield f"{base}.{alias.name}", node.lineno
        elif (
            not top_level_only
            and isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno


def test_the_module_reader_sees_every_kind_of_import(tmp_path):
    (tmp_path / "pkg").mkdir()
    path = tmp_path / "pkg" / "mod.py"
    path.write_text(
        "import inference.api\n"
        "from ..inference import models\n"
        "def f():\n"
        "    from inference.services import x\n"
        "    importlib.import_module('inference.vlm_pages')\n"
    )
    found = {name for name, _ in imports_of("training.pkg.mod", path)}
    assert {"inference.api", "training.inference.models", "inference.services", "inference.vlm_pages"} <= found
    assert {name for name, _ in imports_of("training.pkg.mod", path, top_level_only=True)} == {
        "inference.api",
        "training.inference",
        "training.inference.models",
    }


def test_the_ground_floor_is_a_layer_of_its_own():
    assert [layer(m) for m in ("common", "common.metrics", "commons", "webapp.settings")] == [
        COMMON,
        COMMON,
        "commons",
        "webapp",
    ]


def test_no_app_imports_an_app_built_on_it():
    modules = [(module, path) for app in APPS for module, path in app_modules(app)]
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for module, path in modules
        for name, line in imports_of(module, path)
        if layer(name) in FORBIDDEN.get(layer(module), set()) and layer(name) != layer(module)
    ]
    assert not wrong, "\n".join(wrong)


def test_celery_and_its_heartbeats_load_no_app_at_start_up():
    """Celery imports webapp.celery before Django is set up; an app's module there would load its models."""
    wrong = [
        f"{module} imports {name}"
        for module in ("webapp.celery", "webapp.monitoring.heartbeats")
        for name, _ in imports_of(module, ROOT / f"{module.replace('.', '/')}.py", top_level_only=True)
        if layer(name) in SERVER - {"webapp", COMMON}
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles_between_modules_at_import_time():
    """Module-level imports only: an import inside a function runs after both modules have loaded."""
    modules = {module: path for app in APPS for module, path in app_modules(app)}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for name, _ in imports_of(module, path, top_level_only=True):
            while name and name not in modules:  # `from pkg.mod import func` -> pkg.mod
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(f"{name}."):  # a package's own __init__
                graph[module].add(name)
    cycles: list[list[str]] = []
    while len(cycles) < 20:
        try:
            TopologicalSorter(graph).prepare()
            break
        except CycleError as exc:
            cycle = exc.args[1]  # [a, b, ..., a]: each one is imported by the next
            cycles.append(cycle[::-1])
            graph[cycle[1]].discard(cycle[0])  # drop one edge of it and look for the next
    found = {frozenset(cycle) for cycle in cycles}
    new = [" imports ".join(cycle) for cycle in cycles if frozenset(cycle) not in KNOWN_CYCLES]
    assert not new, "\n".join(new)
    assert found >= KNOWN_CYCLES, f"gone, delete from KNOWN_CYCLES: {[sorted(c) for c in KNOWN_CYCLES - found]}"


def test_no_import_cycles_at_all_but_through_a_tasks_module():
    """Imports inside functions too (those for the type checker alone never run): a cycle is allowed only through
    a `tasks` module (HackSoft's "import the service in the task body": a service queues its task and the task
    runs the service)."""
    modules = {module: path for app in APPS for module, path in app_modules(app)}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for name, _ in imports_of(module, path, runtime_only=True):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(f"{name}."):
                graph[module].add(name)
    through_tasks = {m for m in modules if m.rpartition(".")[2] == "tasks"}
    outside = {m: deps - through_tasks for m, deps in graph.items() if m not in through_tasks}
    try:
        TopologicalSorter(outside).prepare()
    except CycleError as exc:
        raise AssertionError(" imports ".join(exc.args[1][::-1])) from None
