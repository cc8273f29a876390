"""A web process that ends with the uvicorn parent that started it (no Django).

`uvicorn --workers N` (the Procfile's web line) holds the listening socket in its parent and starts the web
processes as multiprocessing children, replacing one that dies. Killed with SIGKILL, the parent left its
children serving as orphans: supervisord's new parent could not bind the port (they held it) and no one
replaced an orphan that died. `exit_with_parent` asks Linux for SIGTERM when the parent goes (uvicorn's
graceful shutdown: requests in flight are answered first); elsewhere it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal

PR_SET_PDEATHSIG = 1


def exit_with_parent() -> bool:
    """In a multiprocessing child (a uvicorn web process): SIGTERM once its parent dies. Whether it was set."""
    parent = multiprocessing.parent_process()
    if parent is None or not hasattr(os, "getppid"):
        return False
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) == 0:
            if os.getppid() != parent.pid:  # the parent died before the request: it will not be signalled
                os.kill(os.getpid(), signal.SIGTERM)
            return True
    return False
