"""Prometheus metrics of one process (prometheus-client's default registry). No Django here.

Every process keeps its own counters and is scraped on its own: a web process at `/metrics`, each
inference worker on its own port (`INFERENCE_METRICS_PORT`). Per-process registries keep the hot paths
free of shared files (prometheus-client's multiprocess mode) and each target's `instance` label tells
processes apart; sum over instances in queries. State that lives in the database or Redis (queue depths,
job states, deployment health, workers alive) is read at scrape time by webapp.monitoring.metrics_state instead.

Label values are bounded: endpoints are URL patterns (never raw paths), deployments are names that exist.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

# Web processes.
http_requests = Counter(
    "rs_http_requests",
    "HTTP requests answered, by URL pattern, method, status class and deployment (reward endpoints).",
    ["endpoint", "method", "status", "deployment"],
)
http_request_seconds = Histogram(
    "rs_http_request_seconds",
    "Time to answer an HTTP request, by URL pattern and deployment.",
    ["endpoint", "method", "deployment"],
    buckets=LATENCY_BUCKETS,
)
teleop_streams = Gauge("rs_teleop_streams", "Teleop agent connections open on this web process.")
teleop_steps = Counter("rs_teleop_steps", "Teleop steps received from agents.")
teleop_dropped_frames = Counter(
    "rs_teleop_dropped_frames", "Teleop frames replaced by a newer one before they were scored."
)

# Inference workers.
inference_items = Counter("rs_inference_items", "Items (images) scored, by deployment.", ["deployment"])
inference_errors = Counter(
    "rs_inference_errors", "Requests answered with an error (load or scoring failure).", ["deployment"]
)
inference_batch_size = Histogram(
    "rs_inference_batch_size", "Items per scored batch, by deployment.", ["deployment"], buckets=BATCH_BUCKETS
)
inference_batch_seconds = Histogram(
    "rs_inference_batch_seconds", "Time to score one batch, by deployment.", ["deployment"], buckets=LATENCY_BUCKETS
)
inference_queue_wait_seconds = Histogram(
    "rs_inference_queue_wait_seconds",
    "Time a request waited in Redis before its batch was scored.",
    ["deployment"],
    buckets=LATENCY_BUCKETS,
)
model_load_seconds = Histogram(
    "rs_model_load_seconds",
    "Time to load a deployment's model in an inference worker.",
    ["deployment"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
)
model_load_failures = Counter("rs_model_load_failures", "Model loads that failed, by deployment.", ["deployment"])


def status_class(status: int) -> str:
    """`2xx`, `4xx`, ...: keeps the label set small."""
    return f"{status // 100}xx"


def observe_request(endpoint: str, method: str, status: int, seconds: float, deployment: str = "") -> None:
    count, duration = _request_series(endpoint, method, status_class(status), deployment)
    count.inc()
    duration.observe(seconds)


# A series' child is looked up once (`labels()` validates and hashes its values on every call); the label
# values are bounded (see above), so the caches stay small.
@lru_cache(maxsize=4096)
def _request_series(endpoint: str, method: str, status: str, deployment: str) -> tuple[Any, Any]:
    return http_requests.labels(endpoint, method, status, deployment), http_request_seconds.labels(
        endpoint, method, deployment
    )


class InferenceSeries(NamedTuple):
    queue_wait_seconds: Any
    batch_seconds: Any
    batch_size: Any
    items: Any


@lru_cache(maxsize=1024)
def inference_series(deployment: str) -> InferenceSeries:
    """One deployment's per-batch series in an inference worker."""
    return InferenceSeries(
        inference_queue_wait_seconds.labels(deployment),
        inference_batch_seconds.labels(deployment),
        inference_batch_size.labels(deployment),
        inference_items.labels(deployment),
    )
