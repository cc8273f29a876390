"""The manual (README.md, docs/ and bench/README.md) says what the code does: its settings table
(docs/operations.md) against webapp/settings.py (every setting documented, every documented one read, the
defaults alike), the reward types against the Deployment model, and every `manage.py` command of ours
documented; the README stays a front door. Read as text and syntax: nothing here imports the settings module
again or needs a database."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
OPERATIONS = (DOCS / "operations.md").read_text()  # "Settings"
SERVING = (DOCS / "serving.md").read_text()  # "Serving rewards to RL workers"
MANUAL = "\n".join(
    [README, *(path.read_text() for path in sorted(DOCS.glob("*.md"))), (ROOT / "bench" / "README.md").read_text()]
)
README_MAX_LINES = 250  # the README is the front door: the pitch, the two commands, the tour, what runs, links
SETTINGS = ROOT / "webapp" / "settings.py"
ENV_HELPERS = {"env_str", "env_bool", "env_int", "env_list", "env_path", "env_rate", "env_cidrs", "env_choice"}
ENV_HELPERS |= {"secret_key"}
# Where an environment variable may be read besides webapp/settings.py: the run and setup scripts.
OTHER_READERS = [*ROOT.glob("scripts/*.sh"), *ROOT.glob("scripts/*.py"), ROOT / "Procfile"]


def manual_section(title: str, text: str = OPERATIONS) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def settings_table() -> dict[str, str]:
    """Variable name -> the manual's default for it (the text of its backticked value, "" for "empty", None
    where the default is said in words only). Rows of several names give their defaults in the same order."""
    rows: dict[str, str] = {}
    for line in manual_section("Settings").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0])
        values = re.findall(r"`([^`]*)`", cells[1])
        for i, name in enumerate(names):
            assert name not in rows, f"docs/operations.md: {name} has two rows in the settings table"
            rows[name] = "" if cells[1].startswith("empty") else (values[i] if i < len(values) else None)
    assert len(rows) > 30, (
        "docs/operations.md's settings table was not found (## Settings, rows of | `NAME` | default |)"
    )
    return rows


def settings_reads() -> dict[str, ast.expr | None]:
    """Variable name -> the default expression webapp/settings.py gives it (None: no default argument)."""
    reads: dict[str, ast.expr | None] = {}
    for node in ast.walk(ast.parse(SETTINGS.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ENV_HELPERS:
            first = node.args[0]
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), ast.unparse(node)
            reads[first.value] = node.args[1] if len(node.args) > 1 else None
    return reads


def constant_text(expression: ast.expr | None) -> str | None:
    """How the manual writes a default that is a constant in settings.py (`2048`, `0` for False, `a,b` for a
    list); None for one computed at start-up (a path under RS_DATA_DIR, a choice by database engine)."""
    if expression is None:
        return None
    try:
        value = eval(compile(ast.Expression(expression), "settings.py", "eval"), {"__builtins__": {}})  # noqa: S307
    except NameError:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def test_every_setting_is_in_the_readme_table():
    missing = sorted(set(settings_reads()) - set(settings_table()))
    assert not missing, f"read in webapp/settings.py but not in docs/operations.md's settings table: {missing}"


def test_every_documented_setting_is_read():
    read_elsewhere = "\n".join(path.read_text() for path in OTHER_READERS if path.exists())
    unread = sorted(
        name for name in set(settings_table()) - set(settings_reads()) if not re.search(rf"\b{name}\b", read_elsewhere)
    )
    assert not unread, (
        f"in docs/operations.md's settings table but read nowhere (webapp/settings.py, scripts/): {unread}"
    )


def test_documented_defaults_are_the_code_defaults():
    table, reads = settings_table(), settings_reads()
    wrong = []
    for name, expression in reads.items():
        code = constant_text(expression)
        if code is not None and name in table and table[name] != code:
            wrong.append(f"{name}: docs/operations.md {table[name]!r}, webapp/settings.py {code!r}")
    assert not wrong, "defaults differ:\n" + "\n".join(wrong)


def test_the_defaults_check_reads_constants_and_skips_computed_ones():
    def default(source: str) -> str | None:
        call = ast.parse(source, mode="eval").body
        assert isinstance(call, ast.Call)
        return constant_text(call.args[1] if len(call.args) > 1 else None)

    assert default('env_int("X", 1024 * 224 * 224)') == "51380224"
    assert default('env_bool("X", False)') == "0"
    assert default('env_list("X", ["a", "[::1]"])') == "a,[::1]"
    assert default('env_path("X", DATA_DIR / "media")') is None
    assert default('secret_key("X")') is None


def documented_lists(field: str, text: str) -> list[list[str]]:
    """The values the manual lists for a backticked `field`: in prose (`field` `a`, `b` or `c`, parenthetical
    remarks between them left out) and in tables (`field` = `a` / `b`)."""
    plain = re.sub(r"\([^()]*\)", "", text)
    item = r"`([a-z_]+)`"
    forms = (rf"`{field}`\s+{item}((?:\s*(?:,|or)\s*{item})*)", rf"`{field}` = {item}((?:\s*/\s*{item})*)")
    return [[m.group(1), *re.findall(item, m.group(2))] for form in forms for m in re.finditer(form, plain)]


def test_reward_types_are_the_deployment_models():
    from inference.models import Deployment

    lists = documented_lists("reward_type", MANUAL)
    assert len(lists) >= 2, f"the manual's `reward_type` lists were not found: {lists}"
    # the first, where deployments are introduced ("Serving rewards to RL workers"), names every type
    introduced = documented_lists("reward_type", SERVING)
    assert introduced, "docs/serving.md lists no `reward_type` values"
    assert sorted(introduced[0]) == sorted(Deployment.RewardType.values), introduced[0]
    unknown = sorted({value for values in lists for value in values} - set(Deployment.RewardType.values))
    assert not unknown, f"the manual names reward types the API refuses: {unknown}"


def test_every_management_command_is_documented():
    commands = sorted(
        path.stem
        for path in ROOT.glob("*/management/commands/*.py")
        if not path.name.startswith("_") and ".venv" not in path.parts
    )
    assert len(commands) >= 5, commands
    undocumented = [name for name in commands if not re.search(rf"manage\.py {name}\b", MANUAL)]
    assert not undocumented, f"management commands the manual never shows (`manage.py NAME`): {undocumented}"


def test_the_readme_is_a_front_door():
    lines = len(README.splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move the manual's part of it to docs/"
