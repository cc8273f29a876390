"""Scale benchmark: how page, API and background costs grow with a project's size.

Builds projects of about 10k, 100k and 1M frames (steps of 100 x 2 cameras per episode; every Frame row
points at one of a handful of small PNG files, so seeding is a few server-side INSERT ... SELECT
statements, not a million file writes), and measures at each size:

  reads, through uvicorn as the Procfile runs it (median of several requests, each beside 300 ms; after
  VACUUM ANALYZE, the state autovacuum leaves the tables in shortly after a bulk write, and the project
  page once before it, right after the seed and the proposal generation, in the state those bulk paths
  leave the tables in):
    - the project page (progress, proposals, first page of the episode list),
    - the filtered episode list: page and API (`/api/projects/<pk>/episodes`, when the server has it),
    - the labeling payload of one episode (API and page);
  background work, the task bodies called in this process (not through a Celery worker: the bench times
  the work itself, not queue latency, and stays independent of how the task is wrapped):
    - proposal generation over the whole project (`labeling.proposals.services.proposals_generate`),
    - snapshot build (`training.snapshots.services.snapshot_build`, the body of `build_snapshot`);
  and the snapshot download through uvicorn (time to first byte beside 300 ms; rate beside the rate of
  reading the snapshot's files from disk).

Background work is shown per frame of the project and beside its limit: twice the per-frame cost of the
bare decode-and-write loop (read a frame file, decode it, re-encode it as PNG, write it) measured in the
same run. Snapshot builds above `--snapshot-cap` frames are skipped (said so in the table).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rs_bench .venv/bin/python bench/scale.py
    .venv/bin/python bench/scale.py --sizes 10000,100000   # a quicker run
    .venv/bin/python bench/scale.py --sizes 1000000 --keep                    # seed once, leave it in place
    .venv/bin/python bench/scale.py --sizes 1000000 --reuse --measures reads  # then measure it again

Options: --sizes picks the project sizes; --measures picks a subset of reads, proposals, snapshot (default
all three; reads always include the project page right after the seed when the project was seeded in this
run); --keep leaves the seeded projects in the database; --reuse measures the projects a --keep run left
(seeding and proposal generation are skipped for them; a size not found is seeded) and implies --keep.

Needs PostgreSQL (the production setting). It removes what it seeded at the end unless --keep or --reuse.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after ROOT: bench/inference.py must not hide the inference app
from harness import parse_args, procfile_line, scratch_environment, start_web, stop  # noqa: E402

if TYPE_CHECKING:
    from projects.models import Project

STEPS = 100
CAMERAS = ("main", "extra")
FRAME_FILES = 8
FRAME_SIDE = 32
READ_LIMIT_MS = 300.0
BACKGROUND_FACTOR = 2.0
PROJECT_PREFIX = "Scale bench"
USERNAME = "scale-bench"


@dataclass
class SizeResult:
    frames: int
    episodes: int
    seed_s: float = 0.0
    reads_ms: dict[str, float] = field(default_factory=dict)
    proposals_s: float | None = None
    snapshot_s: float | None = None
    snapshot_frames: int = 0
    snapshot_note: str = ""
    download_ttfb_ms: float | None = None
    download_s: float | None = None
    download_mb: float = 0.0
    disk_read_mb_s: float = 0.0


# ---------------------------------------------------------------- seeding


def write_frame_files(media_root: Path) -> list[str]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    folder = media_root / "frames" / "scale-bench"
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(FRAME_FILES):
        array = rng.integers(0, 255, size=(FRAME_SIDE, FRAME_SIDE, 3), dtype=np.uint8)
        name = f"frames/scale-bench/{i}.png"
        Image.fromarray(array, "RGB").save(media_root / name, format="PNG")
        names.append(name)
    return names


def seed_project(*, size: int, user) -> tuple[Project, int]:
    """A project of about `size` frames: episodes of STEPS steps x 2 cameras, a fifth of them fully labeled by
    a person, a fifth half labeled, each labeled one with a few human windows; three agents, three sources."""
    from django.db import connection

    from labeling.table_stats import EPISODE_TABLES, refresh_after_bulk_write
    from projects.models import Agent, Membership, Project

    episodes = max(1, round(size / (STEPS * len(CAMERAS))))
    project = Project.objects.create(name=f"{PROJECT_PREFIX} {size}", task_description="Scale bench")
    Membership.objects.create(project=project, user=user, role=Membership.Role.MANAGER)
    agents = [
        Agent.objects.get_or_create(name=f"scale-bench-agent-{i}", defaults={"token_hash": secrets.token_hex(32)})[0]
        for i in range(3)
    ]
    params = {"p": project.pk, "n": episodes, "steps": STEPS, "a0": agents[0].pk, "a1": agents[1].pk}
    params["a2"] = agents[2].pk
    with connection.cursor() as cur:
        cur.execute(
            """INSERT INTO labeling_episode (project_id, uuid, source, agent_id, env_id, success, status, num_steps,
                   metadata, created_at, finished_at)
               SELECT %(p)s, gen_random_uuid(), (ARRAY['sim','robot','import'])[1 + g %% 3],
                   (ARRAY[%(a0)s, %(a1)s, %(a2)s]::bigint[])[1 + g %% 3], 'PickCube-v1',
                   CASE WHEN g %% 7 = 0 THEN NULL ELSE g %% 2 = 0 END, 'finished', %(steps)s, '{}'::jsonb,
                   now() - (%(n)s - g) * interval '1 second', now()
               FROM generate_series(1, %(n)s) g""",
            params,
        )
        cur.execute(
            """INSERT INTO labeling_step (episode_id, index, action, reward, terminated, truncated, env_success,
                   score, info)
               SELECT e.id, i, '[0.0, 0.0]'::jsonb, i::float / %(steps)s, false, false,
                   coalesce(e.success, false) AND i >= %(steps)s * 0.8, NULL, '{}'::jsonb
               FROM labeling_episode e CROSS JOIN generate_series(0, %(steps)s - 1) i
               WHERE e.project_id = %(p)s""",
            params,
        )
        cur.execute(
            """INSERT INTO labeling_frame (step_id, camera, image, width, height)
               SELECT s.id, c.cam, 'frames/scale-bench/' || ((s.index + c.k) %% %(files)s) || '.png', %(side)s, %(side)s
               FROM labeling_step s JOIN labeling_episode e ON e.id = s.episode_id
               CROSS JOIN (VALUES ('main', 0), ('extra', 1)) AS c(cam, k)
               WHERE e.project_id = %(p)s""",
            {**params, "files": FRAME_FILES, "side": FRAME_SIDE},
        )
        # Human frame labels: every step of each fifth episode, the first half of the next fifth.
        cur.execute(
            """INSERT INTO labeling_framelabel (project_id, episode_id, step_id, value, source, status, author_id,
                   agent_id, params, created_at, updated_at)
               SELECT %(p)s, e.id, s.id, CASE WHEN s.env_success THEN 'success' ELSE 'fail' END, 'human', 'open',
                   %(u)s, NULL, '{}'::jsonb, now(), now()
               FROM labeling_step s JOIN labeling_episode e ON e.id = s.episode_id
               WHERE e.project_id = %(p)s AND (e.id %% 5 = 0 OR (e.id %% 5 = 1 AND s.index < %(steps)s / 2))""",
            {**params, "u": user.pk},
        )
        cur.execute(
            """INSERT INTO labeling_windowlabel (project_id, episode_id, start, "end", value, source, status,
                   author_id, score, params, created_at, updated_at)
               SELECT %(p)s, e.id, w * 20, w * 20 + 4, (ARRAY['positive','negative','unclear'])[1 + w %% 3],
                   'human', 'open', %(u)s, NULL, '{}'::jsonb, now(), now()
               FROM labeling_episode e CROSS JOIN generate_series(0, %(steps)s / 20 - 1) w
               WHERE e.project_id = %(p)s AND e.id %% 5 = 0""",
            {**params, "u": user.pk},
        )
    # What the app's bulk paths (imports, proposal generation) do at their end: fresh statistics and
    # visibility maps for the tables they wrote.
    refresh_after_bulk_write(EPISODE_TABLES, rows=episodes * STEPS * len(CAMERAS))
    return project, episodes


def vacuum() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "VACUUM (ANALYZE) labeling_episode, labeling_step, labeling_frame, labeling_framelabel, "
            "labeling_windowlabel, labeling_labelchange"
        )


def remove_projects() -> None:
    """Deletes the bench's projects with set-based SQL first (the ORM's cascade would walk a million rows)."""
    import shutil

    from django.db import connection, transaction

    from projects.models import Project
    from training.models import DatasetSnapshot
    from training.storage import local_path

    ids = list(Project.objects.filter(name__startswith=PROJECT_PREFIX).values_list("pk", flat=True))
    if not ids:
        return
    for folder in DatasetSnapshot.objects.filter(project_id__in=ids).values_list("folder", flat=True):
        shutil.rmtree(local_path(folder).parent, ignore_errors=True)
    with transaction.atomic(), connection.cursor() as cur:
        for table in ("labeling_labelchange", "labeling_framelabel", "labeling_windowlabel"):
            cur.execute(f"DELETE FROM {table} WHERE project_id = ANY(%s)", [ids])
        cur.execute(
            """DELETE FROM labeling_frame f USING labeling_step s, labeling_episode e
               WHERE f.step_id = s.id AND s.episode_id = e.id AND e.project_id = ANY(%s)""",
            [ids],
        )
        cur.execute(
            "DELETE FROM labeling_step s USING labeling_episode e WHERE s.episode_id = e.id AND e.project_id = ANY(%s)",
            [ids],
        )
        cur.execute("DELETE FROM labeling_episode WHERE project_id = ANY(%s)", [ids])
    Project.objects.filter(pk__in=ids).delete()


# ---------------------------------------------------------------- measuring


def login(url: str, password: str):
    import requests

    session = requests.Session()
    session.get(f"{url}/accounts/login/").raise_for_status()
    response = session.post(
        f"{url}/accounts/login/",
        data={"username": USERNAME, "password": password, "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        headers={"Referer": f"{url}/accounts/login/"},
    )
    response.raise_for_status()
    if "sessionid" not in session.cookies:
        raise RuntimeError("bench login failed")
    return session


def timed_get(session, url: str, repeats: int) -> float | None:
    """Median milliseconds of `repeats` GETs after one warm-up; None when the server has no such route."""
    first = session.get(url)
    if first.status_code == 404:
        return None
    first.raise_for_status()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = session.get(url)
        response.raise_for_status()
        _ = response.content
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure_reads(session, url: str, project, repeats: int) -> dict[str, float]:
    from labeling.models import Episode

    middle = Episode.objects.filter(project=project).order_by("-created_at")[
        Episode.objects.filter(project=project).count() // 2
    ]
    pk = project.pk
    probes = {
        "home page (project list)": "/",
        "project page": f"/projects/{pk}/",
        "episode list page, filtered": f"/projects/{pk}/?source=robot&state=partly&proposals=yes",
        "episode list page, last page": f"/projects/{pk}/?state=unlabeled&page=999999",
        "episode list API, filtered": f"/api/projects/{pk}/episodes?source=robot&state=partly&proposals=yes",
        "labeling payload API (one episode)": f"/api/episodes/{middle.uuid}/labeling",
        "labeling page (one episode)": f"/episodes/{middle.uuid}/label/",
        "training page": f"/projects/{pk}/training/",
    }
    out = {}
    for name, path in probes.items():
        value = timed_get(session, url + path, repeats)
        if value is not None:
            out[name] = value
    return out


def measure_download(session, url: str, snapshot_id: int) -> tuple[float, float, float]:
    """Time to first byte (ms), total seconds and megabytes of one snapshot download."""
    started = time.perf_counter()
    ttfb = None
    total = 0
    with session.get(f"{url}/snapshots/{snapshot_id}/download", stream=True) as response:
        response.raise_for_status()
        for chunk in response.iter_content(chunk_size=1 << 20):
            if ttfb is None:
                ttfb = (time.perf_counter() - started) * 1000
            total += len(chunk)
    return ttfb or 0.0, time.perf_counter() - started, total / 1e6


def disk_read_rate(folder: Path) -> float:
    """MB/s of reading every file of the snapshot folder (the bare cost a download cannot go below)."""
    started = time.perf_counter()
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix != ".zip":
            with path.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    total += len(chunk)
    return total / 1e6 / max(time.perf_counter() - started, 1e-9)


def raw_loop_per_frame(media_root: Path, names: list[str], frames: int, out: Path) -> float:
    """Seconds per frame of the bare loop a snapshot build cannot beat: read the file, decode it to RGB,
    re-encode it as PNG and write it, one file per frame."""
    from common.images.checks import decode_rgb, encode_array

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for i in range(frames):
        raw = (media_root / names[i % len(names)]).read_bytes()
        array = decode_rgb(raw)
        (out / f"{i:07d}.png").write_bytes(encode_array(array, max_side=1 << 15, max_pixels=1 << 30).data)
    return (time.perf_counter() - started) / frames


MEASURES = ("reads", "proposals", "snapshot")


def reused_project(size: int) -> tuple[Project, int] | None:
    from projects.models import Project

    project = Project.objects.filter(name=f"{PROJECT_PREFIX} {size}").first()
    return None if project is None else (project, project.episodes.count())


def run_size(
    *, size: int, user, session, url: str, repeats: int, snapshot_cap: int, measures: set[str], reuse: bool
) -> SizeResult:
    from labeling.proposals.services import proposals_generate
    from training.models import DatasetSnapshot
    from training.snapshots.services import snapshot_build, snapshot_create
    from training.storage import local_path

    started = time.perf_counter()
    reused = reused_project(size) if reuse else None
    project, episodes = reused or seed_project(size=size, user=user)
    result = SizeResult(frames=episodes * STEPS * len(CAMERAS), episodes=episodes)
    result.seed_s = time.perf_counter() - started
    if reused:
        print(f"[{size}] reused {result.frames} frames ({episodes} episodes) from a --keep run")
    else:
        print(f"[{size}] seeded {result.frames} frames ({episodes} episodes) in {result.seed_s:.1f} s")

    if "proposals" in measures or not reused:
        started = time.perf_counter()
        proposals_generate(project=project)
        result.proposals_s = time.perf_counter() - started
        print(f"[{size}] proposals generated in {result.proposals_s:.1f} s")

    if "reads" in measures:
        # Right after the bulk writes (seed, proposal generation), before autovacuum has run: what the bulk
        # paths leave behind (labeling/table_stats.py). One read then, the rest after a full VACUUM ANALYZE.
        if not reused:
            fresh = timed_get(session, f"{url}/projects/{project.pk}/", repeats)
            result.reads_ms["project page, right after bulk write"] = fresh or 0.0
        started = time.perf_counter()
        vacuum()
        print(
            f"[{size}] vacuum analyze (what autovacuum does after a bulk write) {time.perf_counter() - started:.1f} s"
        )
        result.reads_ms.update(measure_reads(session, url, project, repeats))
        for name, ms in result.reads_ms.items():
            print(f"[{size}] {name}: {ms:.0f} ms")

    if "snapshot" not in measures:
        result.snapshot_note = "skipped: not in --measures"
        return result
    if result.frames > snapshot_cap:
        result.snapshot_note = f"skipped: over --snapshot-cap {snapshot_cap}"
        return result
    snapshot = snapshot_create(project=project, options={"sources": ["human"]}, created_by=user, build=False)
    started = time.perf_counter()
    status = snapshot_build(snapshot_id=snapshot.pk)
    result.snapshot_s = time.perf_counter() - started
    snapshot.refresh_from_db()
    if status != DatasetSnapshot.Status.READY:
        raise RuntimeError(f"snapshot build {status}: {snapshot.error[:2000]}")
    result.snapshot_frames = snapshot.frames_total
    print(f"[{size}] snapshot built in {result.snapshot_s:.1f} s ({snapshot.frames_total} frames written)")
    result.disk_read_mb_s = disk_read_rate(local_path(snapshot.folder))
    result.download_ttfb_ms, result.download_s, result.download_mb = measure_download(session, url, snapshot.pk)
    print(
        f"[{size}] download {result.download_mb:.0f} MB: first byte {result.download_ttfb_ms:.0f} ms, "
        f"all {result.download_s:.1f} s"
    )
    return result


# ---------------------------------------------------------------- report


def report(results: list[SizeResult], raw_s: float) -> None:
    limit_us = BACKGROUND_FACTOR * raw_s * 1e6
    print()
    print(f"raw decode-and-write loop: {raw_s * 1e6:.1f} us/frame; background limit {limit_us:.1f} us/frame (2x)")
    header = "measure".ljust(38) + "".join(f"{r.frames:>22,}" for r in results) + "   limit"
    print(header)
    print("-" * len(header))
    names = list(dict.fromkeys(name for r in results for name in r.reads_ms))
    for name in names:
        cells = "".join(f"{(f'{r.reads_ms[name]:.0f} ms' if name in r.reads_ms else 'n/a'):>22}" for r in results)
        worst = max((r.reads_ms.get(name, 0.0) for r in results), default=0.0)
        verdict = "ok" if worst <= READ_LIMIT_MS else "OVER"
        print(f"{name:<38}{cells}   <= {READ_LIMIT_MS:.0f} ms  {verdict}")

    def background(name: str, seconds, frames) -> None:
        cells, worst = "", 0.0
        for s, n in zip(seconds, frames, strict=True):
            if s is None:
                cells += f"{'skipped':>22}"
                continue
            per = s / max(n, 1) * 1e6
            worst = max(worst, per)
            cells += f"{f'{s:.1f} s {per:.1f} us/f':>22}"
        verdict = "ok" if worst <= limit_us else "OVER"
        print(f"{name:<38}{cells}   <= {limit_us:.1f} us/f  {verdict}")

    background("proposal generation (per frame)", [r.proposals_s for r in results], [r.frames for r in results])
    background(
        "snapshot build (per frame written)", [r.snapshot_s for r in results], [r.snapshot_frames for r in results]
    )
    print(
        f"{'snapshot download, first byte':<38}"
        + "".join(
            f"{(f'{r.download_ttfb_ms:.0f} ms' if r.download_ttfb_ms is not None else 'skipped'):>22}" for r in results
        )
        + f"   <= {READ_LIMIT_MS:.0f} ms"
    )
    print(
        f"{'snapshot download, MB/s (disk read)':<38}"
        + "".join(
            f"{(f'{r.download_mb / r.download_s:.0f} ({r.disk_read_mb_s:.0f})' if r.download_s else 'skipped'):>22}"
            for r in results
        )
        + "   >= 0.5 x disk read"
    )
    for r in results:
        if r.snapshot_note:
            print(f"note: {r.frames:,} frames: snapshot {r.snapshot_note}")


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="frames per project, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="timed requests per read (median shown)")
    parser.add_argument("--snapshot-cap", type=int, default=1_000_000, help="largest project whose snapshot is built")
    parser.add_argument("--raw-frames", type=int, default=5000, help="frames of the bare decode-and-write loop")
    parser.add_argument("--keep", action="store_true", help="leave the seeded projects in the database")
    parser.add_argument("--reuse", action="store_true", help="measure the projects a --keep run left (implies --keep)")
    parser.add_argument("--measures", default=",".join(MEASURES), help=f"a subset of {', '.join(MEASURES)}")
    # 2,000 frames: the least whose fully labeled episodes include a successful one (a snapshot needs both)
    args = parse_args(parser, sizes="2000", repeats=1, raw_frames=50)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    measures = {m.strip() for m in args.measures.split(",") if m.strip()}
    if measures - set(MEASURES):
        parser.error(f"--measures: unknown {', '.join(sorted(measures - set(MEASURES)))}")

    bench_started = time.perf_counter()
    scratch = scratch_environment("scale")
    if not os.environ["DATABASE_URL"].startswith("postgres"):
        sys.exit("bench/scale.py measures the production setting: set DATABASE_URL to a PostgreSQL database")
    import django

    django.setup()
    import torch  # noqa: F401 - the snapshot build imports it on first use; a Celery worker pays that once, not per build
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if not args.reuse:
        remove_projects()
    media_root = Path(os.environ["MEDIA_ROOT"])
    names = write_frame_files(media_root)
    password = secrets.token_urlsafe(12)
    user, _ = get_user_model().objects.get_or_create(username=USERNAME)
    user.set_password(password)
    user.save()

    print(f"load average at the start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    raw_s = raw_loop_per_frame(media_root, names, args.raw_frames, scratch / "raw")
    print(f"raw decode-and-write loop: {raw_s * 1e6:.1f} us/frame over {args.raw_frames} frames")
    print(f"web: {procfile_line('web')}, DB_CONN_MAX_AGE={os.environ.get('DB_CONN_MAX_AGE', '0 (default)')}")
    proc, url = start_web(scratch / "web.log")
    results = []
    try:
        session = login(url, password)
        for size in sizes:
            results.append(
                run_size(
                    size=size,
                    user=user,
                    session=session,
                    url=url,
                    repeats=args.repeats,
                    snapshot_cap=args.snapshot_cap,
                    measures=measures,
                    reuse=args.reuse,
                )
            )
    finally:
        stop(proc)
        if not (args.keep or args.reuse):
            remove_projects()
    report(results, raw_s)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\nbench ran {time.perf_counter() - bench_started:.0f} s on {os.cpu_count()} cores, load average {load} at the end"
    )
    print(f"(scratch folder {scratch})")


if __name__ == "__main__":
    main()
