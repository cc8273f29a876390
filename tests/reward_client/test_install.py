"""reward_client installs on an RL machine on its own: a wheel built from its folder, installed into an empty
target, imports and runs its examples' imports with neither Django nor torch nor the repository on the path."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile

from tests.conftest import ROOT


def test_the_package_builds_installs_and_imports_alone(tmp_path):
    source = tmp_path / "src" / "reward_client"
    shutil.copytree(ROOT / "reward_client", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", str(source), "-w", str(tmp_path)], check=True)
    (wheel,) = tmp_path.glob("reward_studio_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = email.message_from_bytes(archive.read(next(n for n in names if n.endswith("/METADATA"))))
    requires = {  # name: its environment marker ("" for what every install gets)
        r.split(";")[0].split(">")[0].split("=")[0].strip().lower(): r.partition(";")[2].strip()
        for r in metadata.get_all("Requires-Dist") or []
    }
    assert {name for name, marker in requires.items() if not marker} == {"numpy", "requests", "urllib3", "pillow"}
    assert {name for name, marker in requires.items() if marker} == {"orjson"}  # the "fast" extra, used when present
    assert "fast" in requires["orjson"]
    assert set(metadata.get_all("Provides-Extra") or []) == {"fast"}
    assert {"reward_client/client.py", "reward_client/examples/reward_client_example.py"} <= names

    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import reward_client, reward_client.examples.di_engine_reward_model_example, reward_client.examples.rlinf_reward_model_example; "
        "assert reward_client.__file__.startswith(sys.argv[1]), reward_client.__file__; "
        "bad = [m for m in ('django', 'torch', 'webapp', 'inference', 'training', 'labeling') if m in sys.modules]; "
        "assert not bad, bad"
    )
    # -I: the repository (cwd) and PYTHONPATH stay off the path; the venv's site-packages give numpy etc.
    subprocess.run([sys.executable, "-I", "-c", code, str(target)], cwd=tmp_path, check=True)
