"""One settings source: what scripts/run.sh started the app with reaches manage.py and robot_agent run beside it,
and a command that would write elsewhere says so."""

from __future__ import annotations

import os
import subprocess
import sys

from robot_agent.cli import _running_app_url
from webapp.run_env import ROOT, run_env_apply, run_env_format, run_env_parse


def test_the_file_keeps_where_data_goes_and_never_a_secret():
    text = run_env_format(
        {"RS_DATA_DIR": "/srv/rs", "REDIS_URL": "redis://h:6379/0", "SECRET_KEY": "s3cret", "RS_PORT": "9000"}
    )
    assert "RS_DATA_DIR=/srv/rs" in text and "REDIS_URL=redis://h:6379/0" in text and "RS_PORT=9000" in text
    assert "s3cret" not in text and "SECRET_KEY" not in text
    assert run_env_parse(text + "SECRET_KEY=x\n") == {
        "RS_DATA_DIR": "/srv/rs",
        "REDIS_URL": "redis://h:6379/0",
        "RS_PORT": "9000",
    }


def test_a_command_fills_what_it_lacks_and_is_told_when_it_writes_elsewhere(tmp_path):
    path = tmp_path / "run.env"
    path.write_text(run_env_format({"RS_DATA_DIR": "/srv/rs", "DATABASE_URL": "postgres://db/rs", "RS_PORT": "9000"}))
    environ = {"RS_RUN_ENV": str(path)}
    assert run_env_apply(environ) == []
    assert environ["RS_DATA_DIR"] == "/srv/rs" and environ["DATABASE_URL"] == "postgres://db/rs"

    own = {"RS_RUN_ENV": str(path), "DATABASE_URL": "sqlite:///other.sqlite3", "RS_PORT": "8001"}
    warnings = run_env_apply(own)
    assert own["DATABASE_URL"] == "sqlite:///other.sqlite3"  # the command's own setting wins
    assert len(warnings) == 1 and "DATABASE_URL=sqlite:///other.sqlite3" in warnings[0]
    assert "DATABASE_URL=postgres://db/rs" in warnings[0] and "will not show in that app" in warnings[0]
    assert run_env_apply({"RS_RUN_ENV": ""}) == []  # turned off


def test_manage_py_uses_the_run_commands_data_folder(tmp_path):
    """The README's `manage.py ...` beside `RS_DATA_DIR=... scripts/run.sh` reads the same folder (here: the
    settings it prints), written by the same script the run command calls."""
    data = tmp_path / "elsewhere"
    data.mkdir()
    run_env = tmp_path / "run.env"
    subprocess.run(
        [sys.executable, "webapp/run_env.py", str(run_env)],
        cwd=ROOT,
        env={**os.environ, "RS_DATA_DIR": str(data), "RS_PORT": "8123"},
        check=True,
    )
    assert oct(run_env.stat().st_mode & 0o777) == "0o600"
    env = {k: v for k, v in os.environ.items() if k not in ("RS_DATA_DIR", "DATABASE_URL", "MEDIA_ROOT")}
    env["RS_RUN_ENV"] = str(run_env)
    printed = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-v",
            "0",
            "-c",
            "from django.conf import settings; print(settings.DATA_DIR)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert printed.stdout.strip() == str(data)
    assert _running_app_url(run_env) == "http://127.0.0.1:8123"
