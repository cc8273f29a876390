"""celery beat keeps its schedule in RS_DATA_DIR: the Procfile's beat line, run from the checkout as the run
command runs it, stays up with the data folder elsewhere (it crash-looped to FATAL when the Procfile named
`data/celerybeat-schedule`, relative to the checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from scripts.supervisor_conf import procfile_parse

from ..conftest import ROOT


def test_beat_from_the_procfile_keeps_its_schedule_in_a_data_dir_outside_the_checkout(tmp_path):
    data = tmp_path / "elsewhere" / "data"
    data.mkdir(parents=True)
    command = dict(procfile_parse((ROOT / "Procfile").read_text()))["beat"]
    assert "--schedule" not in command  # the settings say where (CELERY_BEAT_SCHEDULE_FILENAME)
    env = {
        **os.environ,
        "RS_DATA_DIR": str(data),
        "CELERY_BROKER_URL": "memory://",  # the sweeps it sends go nowhere
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    log = tmp_path / "beat.log"
    with open(log, "wb") as out:
        beat = subprocess.Popen(["/bin/bash", "-c", command], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not list(data.glob("celerybeat-schedule*")):
            assert beat.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(3.0)  # past its first ticks
        assert beat.poll() is None, log.read_text()[-3000:]
        assert str(data / "celerybeat-schedule") in log.read_text()  # its banner names the file
    finally:
        beat.terminate()
        beat.wait(timeout=20)


def test_the_systemd_unit_names_no_schedule_path_of_its_own():
    unit = (ROOT / "deploy" / "systemd" / "reward-studio-beat.service").read_text()
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert "celery -A webapp beat" in start and "--schedule" not in start
