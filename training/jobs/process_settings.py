"""Per-process settings a job may change (torch's CPU threads), put back after every job.

A training worker runs many jobs in one process: a job's `num_threads` must not become the next job's
(a job that asked for 512 threads once left every later default job of every project on them). No Django.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def job_process_settings() -> Iterator[None]:
    """Runs a job; afterwards (succeeded, failed or cancelled) torch's intra-op threads are what they were
    before it. Interop threads cannot change once set and no trainer sets them."""
    import torch

    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
