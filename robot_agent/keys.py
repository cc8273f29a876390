"""Single key presses from the terminal without Enter (cbreak mode), read by a background thread."""

from __future__ import annotations

import os
import queue
import select
import sys
import threading
from typing import Any, TextIO


class KeyReader:
    """Collects key presses from stdin when it is a terminal; otherwise never reports any."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdin
        self.keys: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: list[Any] | None = None  # the terminal's attributes while in cbreak mode

    @property
    def interactive(self) -> bool:
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def start(self) -> KeyReader:
        if not self.interactive:
            return self
        import termios
        import tty

        fd = self.stream.fileno()
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        self._thread = threading.Thread(target=self._run, name="keys", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        fd = self.stream.fileno()
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                data = os.read(fd, 32).decode(errors="ignore")
                for ch in data:
                    self.keys.put(ch)

    def drain(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self.keys.get_nowait())
            except queue.Empty:
                return out

    def push(self, key: str) -> None:
        """Inject a key (tests, or a GUI in front of the agent)."""
        self.keys.put(key)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
        if self._saved is not None:
            import termios

            termios.tcsetattr(self.stream.fileno(), termios.TCSADRAIN, self._saved)
            self._saved = None
