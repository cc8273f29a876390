"""`python manage.py inference_worker`: serve deployed models from Redis with dynamic batching.

Run one per machine (or more); each loads the models of the deployments it is asked for on demand.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from prometheus_client import start_http_server

from common.redis_clients import redis_from_url
from inference.broker import check_memory_policy
from inference.models import Deployment
from inference.services import deployment_set_health
from inference.workers.loop import InferenceWorker
from training.families import scorer_load
from training.kit.family_parts import ModelSpec, Scorer
from training.storage import local_path

T = TypeVar("T")


def deployment_scorer(name: str, device: str) -> tuple[int, Scorer]:
    """The deployment's version and its model's scorer, from the model's family (`training.families`)."""
    row = Deployment.objects.select_related("trained_model").get(name=name)
    model = row.trained_model
    spec = ModelSpec(
        kind=model.kind,
        folder=local_path(model.checkpoint_path),
        config=model.config,
        device=device,
        precision=row.inference_precision,
    )
    return row.version, scorer_load(spec)


def read_on_kept_connection(read: Callable[[], T]) -> T:
    """A read the worker repeats every second (the deployment list) on a connection it keeps open, rather
    than a new database connection each time (CONN_MAX_AGE 0 would close it). A connection the server
    dropped fails the first query: it is closed and the read runs once more on a fresh one."""
    for attempt in (1, 2):
        try:
            return read()
        except (OperationalError, InterfaceError):
            if attempt == 2:
                raise
            connection.close()
    raise AssertionError("unreachable")


class Command(BaseCommand):
    help = "Serve deployed reward models: take requests from Redis, batch them, score, reply."

    def add_arguments(self, parser):
        parser.add_argument(
            "--threads",
            type=int,
            default=int(os.environ.get("INFERENCE_THREADS", "0")),
            help="torch threads (0: torch's default); match the raw forward you compare against",
        )
        parser.add_argument("--device", default=os.environ.get("INFERENCE_DEVICE", "cpu"), help="cpu, cuda or cuda:N")
        parser.add_argument("--deployments", default="", help="comma-separated names to serve (default: all)")
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=settings.INFERENCE_METRICS_PORT,
            help="serve Prometheus metrics on this port (0: off; default INFERENCE_METRICS_PORT)",
        )

    def handle(self, *args, threads: int, device: str, deployments: str, metrics_port: int, **options):
        import torch

        if threads > 0:
            torch.set_num_threads(threads)
        import training.resnet.checkpoint  # noqa: F401 - pay the torchvision import before the first request

        only = {n.strip() for n in deployments.split(",") if n.strip()}

        def list_deployments() -> list[str]:
            names = read_on_kept_connection(lambda: list(Deployment.objects.values_list("name", flat=True)))
            return [n for n in names if not only or n in only]

        def load_model(name: str) -> tuple[int, Scorer]:
            close_old_connections()
            return deployment_scorer(name, device)

        def report_health(name: str, version: int | None, error: str) -> None:
            close_old_connections()
            deployment_set_health(name=name, version=version, error=error)

        redis = redis_from_url(settings.REDIS_URL)
        check_memory_policy(redis, logging.getLogger("inference.workers.loop"))
        if metrics_port:
            try:
                start_http_server(metrics_port, addr=settings.INFERENCE_METRICS_HOST)
                self.stdout.write(f"metrics on http://{settings.INFERENCE_METRICS_HOST}:{metrics_port}/metrics")
            except OSError as exc:  # a second worker on the same machine: serve, just without metrics
                self.stderr.write(f"metrics port {metrics_port} unavailable ({exc}); give each worker its own")
        worker = InferenceWorker(
            redis,
            load_model=load_model,
            report_health=report_health,
            list_deployments=list_deployments,
            max_batch_pixels=settings.INFERENCE_BATCH_MAX_PIXELS,
            device=device,
        )
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(
            f"inference worker {worker.worker_id}: torch threads {torch.get_num_threads()}, device {device}"
        )
        worker.run(stop)
