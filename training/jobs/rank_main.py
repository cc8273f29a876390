"""One rank of a data-parallel job: `python -m training.jobs.rank_main JOB_ID --attempt N --out DIR`,
started by torchrun (training.jobs.launch). It joins the process group, runs the trainer of the job's kind (training.families) with a
reporter that only rank 0 lets through, and leaves its outcome in DIR: rank 0 writes `result.json`
(the RunResult, or "cancelled"); a rank that fails writes `rank_<N>.error.json` and exits non-zero, so
torchrun stops the others (a rank whose collective broke because another died says so in that file).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import traceback
from dataclasses import asdict
from pathlib import Path


def _write(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("job_id", type=int)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

    import django

    django.setup()
    from django.db import connection

    from training.families import family
    from training.jobs.limits import paths_confine
    from training.jobs.reporter import JobReporter
    from training.kit import distributed
    from training.kit.reporting import JobCancelled, MemoryReporter
    from training.models import TrainingJob

    rank = int(os.environ.get("RANK", "0"))
    try:
        job = TrainingJob.objects.select_related("project", "snapshot").get(pk=args.job_id)
        job.attempt = args.attempt
        job.config = paths_confine(job.kind, job.config)  # stored relative to MODEL_DIR
        info = distributed.init(str(job.config.get("device", "auto")))
        _write(args.out / f"rank_{rank}.joined", {"rank": rank})  # every node is in: launch stops waiting
        runner = family(job.kind).trainer
        inner = JobReporter(job.pk, attempt=args.attempt) if info.main else MemoryReporter()
        reporter = distributed.RankReporter(inner)
        reporter.log(f"{info.world_size} ranks joined; {info.describe()}")
        try:
            result = runner(job, reporter)
        except JobCancelled as exc:
            if info.main:
                reporter.flush()
                _write(args.out / "result.json", {"status": "cancelled", "message": str(exc)})
            return 0
        if info.main:
            reporter.flush()
            _write(args.out / "result.json", {"status": "succeeded", "result": asdict(result)})
        return 0
    except BaseException as exc:
        args.out.mkdir(parents=True, exist_ok=True)
        _write(
            args.out / f"rank_{rank}.error.json",
            {
                "rank": rank,
                "host": socket.gethostname(),
                "error": f"{exc.__class__.__name__}: {exc}",
                "peer_failure": distributed.is_peer_failure(exc),  # another rank's death broke a collective
                "traceback": traceback.format_exc(),
            },
        )
        raise
    finally:
        distributed.teardown()
        connection.close()


if __name__ == "__main__":
    sys.exit(main())
