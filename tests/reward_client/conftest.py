"""The client package's tests run against the real app: the inference tests' worker process and helpers."""

from tests.inference.conftest import inference_worker_process  # noqa: F401  (a fixture, found by pytest here)
