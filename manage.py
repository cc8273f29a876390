#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def _run_env_load() -> None:
    """The settings of the app scripts/run.sh started, unless this command sets its own (webapp/run_env.py,
    loaded by path: importing the webapp package would read the settings before they are in place)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("run_env", Path(__file__).resolve().parent / "webapp" / "run_env.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.run_env_load()


def main() -> None:
    _run_env_load()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
