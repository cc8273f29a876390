"""How many processes train a job (no torch, no Django): the distributed fields every job kind's config has.

`processes` per node x `nodes` machines; with more than one node they meet at `master_addr:master_port`
(node 0, where the training worker that took the job runs). Checked before a job is queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_PROCESSES = 64  # per node: what a config may say at all; the host's own limit is processes_limit()
MAX_NODES = 64
DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class DistributedSettings:
    """How many processes train a job: `processes` per node on `nodes` machines, meeting at the master."""

    processes: int = 1
    nodes: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT

    @property
    def world_size(self) -> int:
        return self.processes * self.nodes

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> DistributedSettings:
        return cls(
            processes=config.get("processes", 1),
            nodes=config.get("nodes", 1),
            master_addr=config.get("master_addr", "127.0.0.1"),
            master_port=config.get("master_port", DEFAULT_MASTER_PORT),
        )


def settings_errors(processes: Any, nodes: Any, master_addr: Any, master_port: Any) -> list[str]:
    """What is wrong with these distributed fields, one message per field (empty when they are usable)."""
    errors = []
    for name, value, high in (("processes", processes, MAX_PROCESSES), ("nodes", nodes, MAX_NODES)):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
            errors.append(f"{name} must be an integer between 1 and {high}, got {value!r}")
    if (
        not isinstance(master_addr, str)
        or not master_addr
        or len(master_addr) > 253
        or any(c.isspace() for c in master_addr)
    ):
        errors.append(f"master_addr must be a host name or IP address, got {master_addr!r}")
    if not isinstance(master_port, int) or isinstance(master_port, bool) or not 1024 <= master_port <= 65535:
        errors.append(f"master_port must be an integer between 1024 and 65535, got {master_port!r}")
    return errors


def processes_limit(configured: int, gpus: int) -> int:
    """Processes per node this host allows: the admin's `configured` number when set (> 0), else one per GPU
    (one process on a host without GPUs)."""
    return min(configured, MAX_PROCESSES) if configured > 0 else max(1, gpus)


def processes_error(processes: Any, limit: int, *, configured: bool) -> str | None:
    """Why `processes` is more than this host allows (None when it is not)."""
    if not isinstance(processes, int) or isinstance(processes, bool) or processes <= limit:
        return None
    where = "as TRAINING_MAX_PROCESSES says" if configured else "one per GPU"
    allow = "" if configured else "; an admin may allow more with TRAINING_MAX_PROCESSES"
    return f"processes must be at most {limit} per node on this host ({where}), got {processes}{allow}"
