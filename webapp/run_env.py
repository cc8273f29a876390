"""One settings source for every command: what the run command started the app with.

`scripts/run.sh` writes the settings it used (`RUN_ENV_FILE`: `KEY=value` lines, only the names in
`SHARED`, never a secret) before it starts the processes. `manage.py` and `python -m robot_agent` read it
at start, so a command run beside the app talks to the same database, Redis and data folder. A variable set
in the command's own environment wins; where it names another database, Redis or data folder than the
running app's, the command says so on stderr. `RS_RUN_ENV` names another file, or turns it off when empty
(the test command does). No Django imports: robot_agent uses it too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_ENV_FILE = ROOT / ".run.env"
# What decides where a command's data goes and which app it talks to; secrets stay out of the file.
SHARED = ("RS_DATA_DIR", "DATABASE_URL", "REDIS_URL", "MEDIA_ROOT", "MODEL_DIR", "IMPORT_DIR", "RS_HOST", "RS_PORT")
# The ones that make a command's work invisible to the running app when they differ.
WHERE_DATA_GOES = ("RS_DATA_DIR", "DATABASE_URL", "REDIS_URL", "MEDIA_ROOT")


def run_env_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The file to read, or None when `RS_RUN_ENV` is set empty."""
    named = environ.get("RS_RUN_ENV")
    if named is None:
        return RUN_ENV_FILE
    return Path(named) if named else None


def run_env_format(environ: Mapping[str, str]) -> str:
    """The file's text for the settings in `environ` (the run command's environment)."""
    lines = ["# Written by scripts/run.sh: the settings the running app uses (read by manage.py and robot_agent)."]
    lines += [f"{name}={environ[name]}" for name in SHARED if environ.get(name)]
    return "\n".join(lines) + "\n"


def run_env_parse(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        if name in SHARED:
            values[name] = value
    return values


def run_env_apply(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Fill `environ` from the run command's file (names already set are kept); returns one warning per
    kept name that sends this command's data somewhere the running app does not look."""
    path = run_env_path(environ)
    if path is None or not path.is_file():
        return []
    try:
        values = run_env_parse(path.read_text())
    except OSError:
        return []
    warnings = []
    for name, value in values.items():
        if name not in environ:
            environ[name] = value
        elif environ[name] != value and name in WHERE_DATA_GOES:
            warnings.append(
                f"note: this command uses {name}={environ[name]}, but the app started by scripts/run.sh uses "
                f"{name}={value} ({path}): what it writes will not show in that app"
            )
    return warnings


def run_env_load() -> None:
    """`run_env_apply` on this process's environment, warnings to stderr (for command entry points)."""
    for warning in run_env_apply():
        print(warning, file=sys.stderr)


def main(argv: list[str]) -> int:
    """`python webapp/run_env.py FILE`: write the file from this environment (the run command calls it)."""
    if len(argv) != 2:
        print("usage: python webapp/run_env.py FILE", file=sys.stderr)
        return 2
    target = Path(argv[1])
    target.write_text(run_env_format(os.environ))
    target.chmod(0o600)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
