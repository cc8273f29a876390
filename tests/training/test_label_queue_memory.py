"""Memory that goes back: a label-queue recompute of 400 black 2048x2048 frames in a real Celery worker
leaves the worker within 64 MiB of where it started and peaks under a stated budget (the audit's run kept
+3.0 GiB); large frames are decoded at the size the model needs; a task over TASK_MEMORY_BUDGET_MB fails
with the reason."""

from __future__ import annotations

import io
import re
import threading
import time
import uuid

import numpy as np
import pytest
from PIL import Image

from common.images.checks import decode_rgb, encode_array
from common.memory import MIB, rss_bytes

SIDE = 2048
KEPT_MIB = 64  # what the worker may keep after the task (the issue asks 300; without the fix it kept 150-210)
PEAK_MIB = 512  # what the worker may grow by while the task runs (stated in the README)


def _black_frames(project, count: int, png) -> None:
    from labeling.ingest.services import StepInput, episode_create, steps_append

    episode, _ = episode_create(project=project, uuid=uuid.uuid4(), metadata={})
    camera = project.camera_views[0]
    for start in range(0, count, 50):
        rows = [StepInput(index=i, images={camera: png}) for i in range(start, min(count, start + 50))]
        steps_append(episode=episode, steps=rows)


class _Peak:
    """Samples a process's resident memory every 20 ms from a thread; `peak` is the largest seen."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, rss_bytes(pid), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            time.sleep(0.02)

    def __enter__(self) -> _Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _recompute(project_id: int) -> dict:
    from training.tasks import recompute_label_queue

    return recompute_label_queue.apply_async(args=[project_id]).get(timeout=600)


def _settled(pid: int) -> int:
    """The worker's resident memory once the task's after-run handlers are done (it stops changing)."""
    time.sleep(0.5)
    last = rss_bytes(pid)
    for _ in range(20):
        time.sleep(0.25)
        now = rss_bytes(pid)
        if abs(now - last) < 2 * MIB:
            return now
        last = now
    return last


@pytest.mark.django_db(transaction=True)
def test_recompute_of_400_large_frames_gives_the_workers_memory_back(project, celery_worker_process):
    from tests.inference.conftest import make_tiny_checkpoint, make_trained_model

    make_trained_model(project, checkpoint_path=make_tiny_checkpoint(seed=1, size=224))
    png = encode_array(np.zeros((SIDE, SIDE, 3), dtype=np.uint8), max_side=4096, max_pixels=1 << 24)
    pid = celery_worker_process.pid
    _black_frames(project, 10, png)
    assert _recompute(project.pk)["ranked"] == 10  # warm: torch imported, the model's code paths run once
    _black_frames(project, 390, png)
    start = _settled(pid)
    began = time.monotonic()
    with _Peak(pid) as sampled:
        result = _recompute(project.pk)
    seconds = time.monotonic() - began
    after = _settled(pid)
    assert result == {"ranked": 200, "skipped": []}  # QUEUE_SIZE of the 400 frames, none left out
    grown, kept = (sampled.peak - start) / MIB, (after - start) / MIB
    print(
        f"400 x {SIDE}^2 frames in {seconds:.1f} s: worker {start / MIB:.0f} MiB, peak +{grown:.0f}, kept {kept:+.0f}"
    )
    assert kept < KEPT_MIB, f"the worker kept {kept:.0f} MiB after the task"
    assert grown < PEAK_MIB, f"the worker grew by {grown:.0f} MiB during the task"


def _png(side: int) -> bytes:
    return encode_array(np.full((side, side, 3), 200, dtype=np.uint8), max_side=4096, max_pixels=1 << 24).data


def test_a_large_frame_is_decoded_reduced_to_at_least_twice_what_the_task_needs():
    big = _png(SIDE)
    assert decode_rgb(big).shape == (SIDE, SIDE, 3)
    assert decode_rgb(big, at_least=(128, 128)).shape == (256, 256, 3)  # 2048 // 256 = 8, a whole factor
    assert decode_rgb(big, at_least=(100, 300)).shape == (683, 683, 3)  # factor 3 (a last partial box): 600 needed
    assert decode_rgb(big, at_least=(1024, 1024)).shape == (SIDE, SIDE, 3)  # no factor of 2 fits: whole
    assert (decode_rgb(big, at_least=(128, 128)) == 200).all()
    out = io.BytesIO()
    Image.new("RGB", (SIDE, SIDE), (10, 200, 30)).save(out, format="JPEG", quality=95)
    jpeg = decode_rgb(out.getvalue(), at_least=(128, 128))  # DCT-scaled by libjpeg: 1/8
    assert jpeg.shape == (256, 256, 3) and abs(jpeg.astype(int) - [10, 200, 30]).max() <= 3


BUDGET_CHECK = """
import numpy as np
from common.memory import MIB, MemoryBudget, MemoryBudgetExceeded

budget = MemoryBudget(64 * MIB, "the test task")
assert budget.check() < 64 * MIB
held = np.ones(128 * MIB, dtype=np.uint8)  # touched: resident
try:
    budget.check()
except MemoryBudgetExceeded as error:
    print(error)
else:
    raise SystemExit("did not raise")
del held
assert budget.check() < 64 * MIB and budget.peak > 64 * MIB  # freed: back under (own mapping, unmapped)
"""


def test_a_task_over_its_memory_budget_fails_naming_the_setting():
    """In a fresh process (as a worker's task starts): in the test runner, other tests' freed heap that the budget's
    trim hands back, and threads still running, move the resident size by more than the budget."""
    import subprocess
    import sys

    from django.conf import settings

    done = subprocess.run(
        [sys.executable, "-c", BUDGET_CHECK], capture_output=True, text=True, timeout=120, cwd=settings.BASE_DIR
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(
        r"the test task grew its worker by 1\d\d MiB, over its budget of 64 MiB \(TASK_MEMORY_BUDGET_MB\)", done.stdout
    ), done.stdout
