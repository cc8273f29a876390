"""Join a multi-node training job from another machine: run this node's ranks of the job under torchrun.

The training worker that took the job is node 0 (it holds the master address and reports); every other
machine runs `manage.py training_node JOB --node-rank N` with N from 1 to nodes-1. They need the same code,
the database and the job's snapshot files (the same MEDIA_ROOT, or the object store with a STORAGE_CACHE_DIR of
their own: training.storage) and reach node 0 at master_addr:master_port.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from common.jobs.models import JobStatus
from training.jobs.launch import failure_message, torchrun_command, torchrun_start
from training.kit.parallel_config import DistributedSettings
from training.models import TrainingJob


class Command(BaseCommand):
    help = "Run this machine's share of a multi-node training job (node 0 is the training worker)."

    def add_arguments(self, parser):
        parser.add_argument("job", type=int, help="The training job's id.")
        parser.add_argument("--node-rank", type=int, required=True, help="This machine's node rank, 1..nodes-1.")

    def handle(self, *args, job: int, node_rank: int, **options):
        row = TrainingJob.objects.filter(pk=job).first()
        if row is None:
            raise CommandError(f"no training job {job}")
        if row.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
            raise CommandError(f"job {job} is {row.status}; only a queued or running job can be joined")
        spread = DistributedSettings.from_config(row.config)
        if spread.nodes < 2:
            raise CommandError(f"job {job} runs on one node (its config has nodes {spread.nodes}); nothing to join")
        if not 1 <= node_rank < spread.nodes:
            raise CommandError(f"--node-rank must be between 1 and {spread.nodes - 1} (node 0 is the training worker)")
        out_dir = Path(tempfile.mkdtemp(prefix=f"rs-job{job}-node{node_rank}-"))
        try:
            command = torchrun_command(
                spread,
                job_id=job,
                attempt=row.attempt,
                out_dir=out_dir,
                node_rank=node_rank,
                rendezvous_timeout=settings.TRAINING_RENDEZVOUS_TIMEOUT_SECONDS,
            )
            self.stdout.write(
                f"node {node_rank} of {spread.nodes}: {spread.processes} rank(s), meeting node 0 at "
                f"{spread.master_addr}:{spread.master_port}"
            )
            process = torchrun_start(command, out_dir)
            returncode = process.wait()
            failure = failure_message(out_dir, returncode, world_size=spread.world_size)
            if failure:
                raise CommandError(failure)
            self.stdout.write(f"node {node_rank}: its ranks finished")
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
