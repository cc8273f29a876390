"""The agent's WebSocket link to the server: a background thread that connects, says hello, sends queued
messages, reads results, and reconnects (resuming the same session) after a network blip or restart.

The control loop never waits on the network: `send_*` only queue. When the link is down the queue keeps
the newest `max_pending_steps` steps and counts the rest as dropped; control messages are never dropped.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from .protocol import dumps

AGENT_PATH = "/ws/teleop/agent/"


class StreamFatal(RuntimeError):
    """The server refused us for good (bad token, unknown project); retrying cannot help."""


def websocket_url(server: str, path: str = AGENT_PATH) -> str:
    parts = urlsplit(server if "://" in server else f"http://{server}")
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, path, "", ""))


@dataclass
class LinkStats:
    sent_steps: int = 0
    dropped_local: int = 0
    results: int = 0
    dropped_server: int = 0
    last_probability: float | None = None
    last_success: bool | None = None
    last_latency_ms: float | None = None
    reconnects: int = 0
    latencies_ms: list = field(default_factory=list)


class Streamer:
    def __init__(
        self,
        server: str,
        token: str,
        hello: dict,
        *,
        max_pending_steps: int = 20,
        on_result: Callable[[dict], None] | None = None,
    ) -> None:
        self.url = websocket_url(server)
        self.origin = urlunsplit(urlsplit(server if "://" in server else f"http://{server}")[:2] + ("", "", ""))
        self.token = token
        self.hello = dict(hello)
        self.max_pending_steps = max_pending_steps
        self.on_result = on_result
        self.session_id: int | None = None
        self.dashboard_url: str | None = None
        self.stats = LinkStats()
        self.connected = threading.Event()
        self.error: str | None = None
        self.last_warning: str | None = None
        self._pending: deque[tuple[str, str | bytes]] = deque()
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ws: ClientConnection | None = None
        self._reader_done = threading.Event()
        self._closing = False

    # -- the control loop's side -------------------------------------------------------------
    def start(self, wait_s: float = 15.0) -> Streamer:
        self._thread = threading.Thread(target=self._run, name="streamer", daemon=True)
        self._thread.start()
        if wait_s:
            self.connected.wait(wait_s)
            if self.error:
                raise StreamFatal(self.error)
        return self

    def send_json(self, message: dict) -> None:
        self._push("json", dumps(message))

    def send_step(self, payload: bytes) -> None:
        self._push("step", payload)

    def _push(self, kind: str, payload: Any) -> None:
        if self.error:
            raise StreamFatal(self.error)
        with self._lock:
            self._pending.append((kind, payload))
            steps = sum(1 for k, _ in self._pending if k == "step")
            while steps > self.max_pending_steps:
                for i, (k, _) in enumerate(self._pending):
                    if k == "step":
                        del self._pending[i]
                        self.stats.dropped_local += 1
                        steps -= 1
                        break
            self._lock.notify()

    def undelivered_steps(self) -> int:
        """Steps still queued (after `close`: steps that never reached the server)."""
        with self._lock:
            return sum(1 for kind, _ in self._pending if kind == "step")

    def close(self, flush_s: float = 5.0) -> None:
        """Send what is queued and a bye, then wait (up to `flush_s`) for the server to close the link."""
        self._reader_done.clear()
        self._closing = True
        if not self.error:
            self.send_json({"type": "bye"})
        deadline = time.monotonic() + flush_s
        while self.connected.is_set() and time.monotonic() < deadline and self._pending and not self.error:
            time.sleep(0.02)
        if self.connected.is_set():
            self._reader_done.wait(max(0.0, deadline - time.monotonic()))
        self._stop.set()
        with self._lock:
            self._lock.notify()
        if self._thread:
            self._thread.join(timeout=3)

    # -- the network thread ------------------------------------------------------------------
    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                self._session()
                backoff = 0.5
            except StreamFatal as exc:
                self.error = str(exc)
                self.connected.set()
                return
            except (OSError, ConnectionClosed, TimeoutError, InvalidStatus, InvalidURI) as exc:
                if isinstance(exc, InvalidStatus) and exc.response.status_code in (401, 403):
                    self.error = (
                        "the server refused the connection (HTTP 403): check --token, and that the server's "
                        "ALLOWED_HOSTS lists the host in --server"
                    )
                    self.connected.set()
                    return
                if isinstance(exc, ConnectionClosed) and exc.rcvd and exc.rcvd.code in (4400, 4401, 4403, 4404):
                    self.error = f"the server closed the link: {exc.rcvd.reason or exc.rcvd.code}"
                    self.connected.set()
                    return
            self.connected.clear()
            if self._stop.is_set() or (self._closing and not self._pending):
                return
            self.stats.reconnects += 1
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _session(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with connect(
            self.url,
            additional_headers=headers,
            origin=Origin(self.origin),
            max_size=None,
            open_timeout=10,
            close_timeout=2,
        ) as ws:
            hello = dict(self.hello, type="hello")
            if self.session_id is not None:
                hello["session"] = self.session_id
            ws.send(dumps(hello))
            reply = json.loads(ws.recv(timeout=15))
            if reply.get("type") == "error":
                raise StreamFatal(reply.get("message", "the server refused the session"))
            self.session_id = reply["session"]
            self.dashboard_url = reply.get("dashboard")
            self._ws = ws
            reader = threading.Thread(target=self._read, args=(ws,), name="streamer-read", daemon=True)
            reader.start()
            self.connected.set()
            while True:
                with self._lock:
                    while not self._pending and not self._stop.is_set():
                        self._lock.wait(0.5)
                        if not reader.is_alive():
                            raise ConnectionClosed(None, None)
                    if not self._pending:
                        if self._stop.is_set():
                            return
                        continue
                    kind, payload = self._pending[0]
                ws.send(payload)
                with self._lock:
                    if self._pending and self._pending[0][1] is payload:
                        self._pending.popleft()
                if kind == "step":
                    self.stats.sent_steps += 1

    def _read(self, ws: ClientConnection) -> None:
        try:
            for raw in ws:
                message = json.loads(raw)
                kind = message.get("type")
                if kind == "result":
                    self.stats.results += 1
                    self.stats.last_probability = message.get("probability")
                    self.stats.last_success = message.get("success")
                    self.stats.dropped_server = message.get("dropped", self.stats.dropped_server)
                    if message.get("sent_at"):
                        latency = (time.time() - float(message["sent_at"])) * 1000
                        self.stats.last_latency_ms = latency
                        self.stats.latencies_ms.append(latency)
                    if self.on_result:
                        self.on_result(message)
                elif kind in ("error", "warning"):
                    self.last_warning = message.get("message")
        except (ConnectionClosed, OSError, ValueError):
            pass
        finally:
            self._reader_done.set()
