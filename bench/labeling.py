"""Labeling page benchmark, driving the real page in headless Chromium.

Prints, each beside its target with the ratio (figure / target; at most 1.0 meets the target):
  - time for an episode of 1,000 steps x 2 views to become interactive (first frame drawn, keys live),
  - median time from a key press to the next frame drawn, once frames are prefetched,
  - median round trip of saving one label through the REST API.

By default it seeds its own project, user and episode into the database named by DATABASE_URL,
starts uvicorn on a free port, and removes what it seeded afterwards:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rs_bench .venv/bin/python bench/labeling.py

`--storage s3` puts the frames on an object store (SeaweedFS: RS_TEST_S3_ENDPOINT's, or one started here, as
tests/object_store.py does) in a fresh bucket, for the seeding and the web process alike, and removes the bucket
afterwards; the page then gets its frames through the web's media view, which reads each object.

Or point it at a running server and an existing episode:

    .venv/bin/python bench/labeling.py --url http://127.0.0.1:8000 --username me --password pw --episode <uuid>
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after ROOT: bench/inference.py must not hide the inference app
from harness import parse_args, start_web, stop  # noqa: E402

from tests.browser import login  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop shares the main thread

TARGET_INTERACTIVE_S = 1.5
TARGET_KEY_MS = 16.0
TARGET_SAVE_MS = 50.0
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


def seed(steps: int, size: int):
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from projects.models import Membership, Project
    from tests.labeling.factories import episode_with_frames

    call_command("migrate", verbosity=0)
    Project.objects.filter(name="Bench labeling").delete()
    project = Project.objects.create(name="Bench labeling", task_description="Benchmark")
    password = secrets.token_urlsafe(12)
    user, _ = get_user_model().objects.get_or_create(username="bench-labeler")
    user.set_password(password)
    user.save()
    # people see only the projects they are members of (projects.access): a labeler is an annotator
    Membership.objects.create(project=project, user=user, role=Membership.Role.ANNOTATOR)
    started = time.perf_counter()
    episode = episode_with_frames(project=project, num_steps=steps, size=size, chunk=200)
    print(f"seeded {steps} steps x 2 views of {size}x{size} PNG in {time.perf_counter() - started:.1f} s")
    return project, user.username, password, str(episode.uuid)


def cleanup(project) -> None:
    from django.contrib.auth import get_user_model
    from django.core.files.storage import default_storage

    from labeling.models import Frame

    names = list(Frame.objects.filter(step__episode__project=project).values_list("image", flat=True))
    project.delete()
    get_user_model().objects.filter(username="bench-labeler").delete()
    for name in names:
        default_storage.delete(name)


KEY_PROBE = """() => { window.__keyProbe = new Promise((resolve) => {
  // A bubbling listener on window runs after the page's own keydown handler on document, which
  // draws the new step synchronously; then wait for the next animation frame (the paint).
  const before = window.__rs.lastDraw.at;
  const onKey = (event) => {
    window.removeEventListener('keydown', onKey);
    const pressed = event.timeStamp;
    const drawn = window.__rs.lastDraw.at;
    requestAnimationFrame(() => resolve({
      drawn: drawn > before ? drawn - pressed : null,
      painted: performance.now() - pressed,
    }));
  };
  window.addEventListener('keydown', onKey);
}); }"""

SAVE_PROBE = """async ({ uuid, count, first }) => {
  const csrf = document.cookie.match(/csrftoken=([^;]+)/)[1];
  const times = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const response = await fetch(`/api/episodes/${uuid}/frame-labels`, {
      method: 'PUT', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'X-CSRFToken': csrf },
      body: JSON.stringify({ start: first + (i % 7), value: i % 2 ? 'fail' : 'success' }),
    });
    await response.json();
    if (!response.ok) throw new Error(`save failed: ${response.status}`);
    times.push(performance.now() - t0);
  }
  return times;
}"""


def line(name: str, value: float, target: float, unit: str) -> str:
    return f"{name:<44} {value:9.1f} {unit:<3} target <= {target:g} {unit:<3} ratio {value / target:5.2f}"


def run(url: str, username: str, password: str, uuid: str, loads: int, presses: int, saves: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        login(page, url, username, password)

        interactive = []
        for _ in range(loads):
            page.goto(f"{url}/episodes/{uuid}/label/", wait_until="commit")
            page.wait_for_selector("body[data-ready='1']")
            interactive.append(page.evaluate("() => window.__rs.ready") / 1000)
        steps = page.evaluate("() => window.__rs.model.length")
        started = time.perf_counter()
        page.wait_for_function("() => window.__rs.framesComplete()", timeout=120_000)
        prefetch_s = time.perf_counter() - started

        drawn, painted = [], []
        page.keyboard.press("Home")
        for _ in range(presses):
            page.evaluate(KEY_PROBE)
            page.keyboard.press("ArrowRight")
            result = page.evaluate("() => window.__keyProbe")
            if result["drawn"] is not None:
                drawn.append(result["drawn"])
            painted.append(result["painted"])

        save_times = page.evaluate(SAVE_PROBE, {"uuid": uuid, "count": saves, "first": steps // 2})
        revisit = _another_visitor(browser, url, username, password, uuid)
        browser.close()

    print(f"server: {url}; DB_CONN_MAX_AGE={os.environ.get('DB_CONN_MAX_AGE', '0 (default)')}")
    print(f"episode: {steps} steps; all frames prefetched {prefetch_s:.1f} s after the last load")
    print(
        f"interactive over {loads} loads: first {interactive[0]:.2f} s, median {statistics.median(interactive):.2f} s"
    )
    print(
        line(
            f"time to interactive ({steps:,} steps x 2 views)",
            statistics.median(interactive),
            TARGET_INTERACTIVE_S,
            "s",
        )
    )
    print(line("key press -> next frame drawn (median)", statistics.median(drawn), TARGET_KEY_MS, "ms"))
    print(line("key press -> next frame painted (median)", statistics.median(painted), TARGET_KEY_MS, "ms"))
    print(line("save one label, round trip (median)", statistics.median(save_times), TARGET_SAVE_MS, "ms"))
    print(
        f"another browser (nothing cached there; the web has served the episode): interactive {revisit[0]:.2f} s, "
        f"all frames prefetched {revisit[1]:.1f} s after the load"
    )
    print(
        f"(keys: {len(drawn)} presses, p95 drawn {sorted(drawn)[int(0.95 * len(drawn)) - 1]:.1f} ms; "
        f"saves: {len(save_times)}, p95 {sorted(save_times)[int(0.95 * len(save_times)) - 1]:.1f} ms)"
    )


def _another_visitor(browser, url: str, username: str, password: str, uuid: str) -> tuple[float, float]:
    """A second person opening the episode in a browser of their own (an empty HTTP cache) after the first one
    prefetched it all: (time to interactive, seconds until every frame is prefetched after the load)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    login(page, url, username, password)
    started = time.perf_counter()
    page.goto(f"{url}/episodes/{uuid}/label/", wait_until="commit")
    page.wait_for_selector("body[data-ready='1']")
    interactive = page.evaluate("() => window.__rs.ready") / 1000
    page.wait_for_function("() => window.__rs.framesComplete()", timeout=120_000)
    prefetch_s = time.perf_counter() - started
    context.close()
    return interactive, prefetch_s


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (default: start uvicorn here)")
    parser.add_argument("--username")
    parser.add_argument("--password")
    parser.add_argument("--episode", help="UUID of an episode to open (with --url)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--size", type=int, default=128, help="frame side in pixels when seeding")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--presses", type=int, default=100)
    parser.add_argument("--saves", type=int, default=50)
    parser.add_argument("--storage", choices=("local", "s3"), default="local", help="where the seeded frames go")
    args = parse_args(parser, steps=20, size=32, loads=1, presses=5, saves=3)
    if args.url:
        if not (args.username and args.password and args.episode):
            parser.error("--url needs --username, --password and --episode")
        run(args.url, args.username, args.password, args.episode, args.loads, args.presses, args.saves)
        return
    bucket = object_store_use() if args.storage == "s3" else None
    project, username, password, uuid = seed(args.steps, args.size)
    proc, url = start_web(Path(tempfile.mkdtemp(prefix="rs-bench-labeling-")) / "web.log")
    try:
        print(f"frames on: {args.storage}")
        run(url, username, password, uuid, args.loads, args.presses, args.saves)
    finally:
        stop(proc)
        cleanup(project)
        if bucket:
            from tests.object_store import bucket_delete

            bucket_delete(*bucket)


def object_store_use() -> tuple[str, str]:
    """Point this process and the web it starts at a fresh bucket; (endpoint, bucket)."""
    from tests.object_store import ensure_object_store, fresh_bucket, s3_env

    endpoint = ensure_object_store()
    env = s3_env(endpoint, fresh_bucket(endpoint))
    os.environ.update(env, STORAGE_CACHE_DIR=tempfile.mkdtemp(prefix="rs-bench-labeling-cache-"))
    return endpoint, env["S3_BUCKET"]


if __name__ == "__main__":
    main()
