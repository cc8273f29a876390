"""Uploading recorded episodes through the ingest API (create, append chunks of steps, finish).

Chunks travel in the binary chunk format (`robot_agent.chunk_format`) by default: one body per chunk,
which the server's fast path stores without Django's request cycle. `binary=False` sends the same chunk
as multipart form data (a `steps` JSON field and one `frame.<index>.<camera>` file per image), which
every server version takes.

Every call is safe to repeat (episodes are created by the client's UUID, a retried chunk skips the steps
already stored), so connection errors, 429 and 502-504 answers are retried with a backoff. Standard
library only: one keep-alive HTTP connection per client (use one client per thread).
"""

from __future__ import annotations

import http.client
import json
import time
import uuid as uuid_lib
from dataclasses import dataclass
from typing import TypedDict, Unpack
from urllib.parse import urlsplit

from .chunk_format import CONTENT_TYPE, encode_chunk

RETRY_STATUSES = {429, 502, 503, 504}


class EpisodeFields(TypedDict, total=False):
    """The optional fields of `IngestClient.create_episode`, passed on by `upload_episode`."""

    episode: str | None
    source: str
    env_id: str
    metadata: dict | None


class UploadError(RuntimeError):
    """The server refused a request for good (a 4xx other than 429); the message carries its answer."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass
class IngestClient:
    server: str
    token: str
    binary: bool = True
    timeout: float = 60.0
    retries: int = 4
    backoff_s: float = 0.5

    def __post_init__(self) -> None:
        parts = urlsplit(self.server if "://" in self.server else f"http://{self.server}")
        self._https = parts.scheme == "https"
        self._netloc = parts.netloc
        self._base = parts.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None

    def create_episode(
        self,
        project: str,
        *,
        episode: str | None = None,
        source: str = "sim",
        env_id: str = "",
        metadata: dict | None = None,
    ) -> str:
        """The episode's UUID (made here unless given); repeating with the same UUID returns the same episode."""
        episode = episode or str(uuid_lib.uuid4())
        body = {"project": project, "uuid": episode, "source": source, "env_id": env_id, "metadata": metadata or {}}
        self.call("POST", "/api/episodes", _json(body), "application/json")
        return episode

    def append_steps(self, episode: str, steps: list[dict], images: list[dict[str, bytes]]) -> dict:
        """Append one chunk: `steps[i]` the step fields, `images[i]` camera -> PNG/JPEG/.npy bytes.

        Returns the server's {"created", "skipped", "num_steps"}."""
        if self.binary:
            body, content_type = encode_chunk(steps, images), CONTENT_TYPE
        else:
            body, content_type = _multipart(steps, images)
        return self.call("POST", f"/api/episodes/{episode}/steps", body, content_type)

    def finish(self, episode: str, *, success: bool | None = None, metadata: dict | None = None) -> dict:
        return self.call(
            "POST", f"/api/episodes/{episode}/finish", _json({"success": success, "metadata": metadata or {}})
        )

    def upload_episode(
        self,
        project: str,
        steps: list[dict],
        images: list[dict[str, bytes]],
        *,
        chunk_steps: int = 25,
        **create: Unpack[EpisodeFields],
    ) -> str:
        """Create, append in chunks of `chunk_steps`, finish; the episode's UUID."""
        episode = self.create_episode(project, **create)
        for start in range(0, len(steps), chunk_steps):
            self.append_steps(episode, steps[start : start + chunk_steps], images[start : start + chunk_steps])
        self.finish(episode)
        return episode

    def call(self, method: str, path: str, body: bytes = b"", content_type: str = "application/json") -> dict:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
        for attempt in range(self.retries + 1):
            try:
                status, text, retry_after = self._send(method, self._base + path, body, headers)
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if attempt == self.retries:
                    raise
                status, text, retry_after = 0, str(exc), 0
            if status < 400:
                return json.loads(text) if text else {}
            if status not in RETRY_STATUSES and status != 0:
                raise UploadError(status, text)
            if attempt == self.retries:
                raise UploadError(status, text)
            time.sleep(max(retry_after, self.backoff_s * 2**attempt))
        raise AssertionError("unreachable")

    def _send(self, method: str, path: str, body: bytes, headers: dict) -> tuple[int, str, float]:
        if self._conn is None:
            factory = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = factory(self._netloc, timeout=self.timeout)
        self._conn.request(method, path, body=body, headers=headers)
        response = self._conn.getresponse()
        text = response.read().decode("utf-8", "replace")
        retry_after = response.getheader("Retry-After") or "0"
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        return response.status, text, float(retry_after) if retry_after.isdigit() else 0.0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> IngestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def _multipart(steps: list[dict], images: list[dict[str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid_lib.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="steps"\r\n'
        f"Content-Type: application/json\r\n\r\n".encode(),
        _json(steps),
        b"\r\n",
    ]
    for step, per_step in zip(steps, images, strict=True):
        for camera, data in per_step.items():
            name = f"frame.{step['index']}.{camera}"
            parts += [
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n".encode(),
                data,
                b"\r\n",
            ]
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
