"""Uploading recorded episodes through the ingest API (create, append chunks of steps, finish).

Chunks travel in the binary chunk format (`robot_agent.chunk_format`) by default: one body per chunk,
which the server's fast path stores without Django's request cycle. `binary=False` sends the same chunk
as multipart form data (a `steps` JSON field and one `frame.<index>.<camera>` file per image), which
every server version takes.

Every call is safe to repeat (episodes are created by the client's UUID, a retried chunk skips the steps
already stored), so connection errors, timeouts, 429 and every 5xx answer are retried with an exponential
backoff (`retries` times, each wait at most `max_backoff_s`, longer when the server's Retry-After says so).
An error is never taken for success: a call that runs out of retries raises (`UploadError` for an answer,
the connection error otherwise). `upload_episode` resumes: it asks the server which steps it already has
(`GET /api/episodes/<uuid>/steps`) and sends only the chunks still missing, so running it again with the
same episode UUID after a crash of either side finishes the upload with every step stored once. Standard
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

RETRY_STATUSES = {429}  # and every 5xx


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
    retries: int = 8
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0

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

    def stored_ranges(self, episode: str) -> list[tuple[int, int]]:
        """The step indices the server has stored for `episode`, as sorted inclusive (first, last) ranges."""
        answer = self.call("GET", f"/api/episodes/{episode}/steps")
        try:
            return [(int(first), int(last)) for first, last in answer["ranges"]]
        except (KeyError, TypeError, ValueError):
            raise UploadError(200, f"the server's list of stored steps is not understood: {answer!r}") from None

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
        """Create (or find, given `episode=`), append in chunks of `chunk_steps` those the server does not have
        yet, finish; the episode's UUID."""
        episode = self.create_episode(project, **create)
        stored = self.stored_ranges(episode)
        for start in range(0, len(steps), chunk_steps):
            chunk = steps[start : start + chunk_steps]
            if all(_stored(step["index"], stored) for step in chunk):
                continue  # a resumed upload: the server has this chunk
            self.append_steps(episode, chunk, images[start : start + chunk_steps])
        self.finish(episode)
        return episode

    def call(self, method: str, path: str, body: bytes = b"", content_type: str = "application/json") -> dict:
        """The JSON answer of a 2xx; retries connection errors, 429 and 5xx (see the module's docstring);
        `UploadError` for any other answer or a 2xx that is not a JSON object."""
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
        for attempt in range(self.retries + 1):
            try:
                status, text, retry_after = self._send(method, self._base + path, body, headers)
            except (OSError, http.client.HTTPException):  # refused, reset, timed out, cut mid-answer
                self.close()
                if attempt == self.retries:
                    raise
                self._wait(attempt, 0.0)
                continue
            if 200 <= status < 300:
                return _answer(status, text)
            if status not in RETRY_STATUSES and status < 500:
                raise UploadError(status, text)
            if attempt == self.retries:
                raise UploadError(status, text)
            self._wait(attempt, retry_after)
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, retry_after: float) -> None:
        time.sleep(max(retry_after, min(self.max_backoff_s, self.backoff_s * 2**attempt)))

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


def _answer(status: int, text: str) -> dict:
    """A 2xx answer's JSON object; anything else is an error, never a success."""
    try:
        value = json.loads(text)
    except ValueError:
        raise UploadError(status, f"the answer is not JSON: {text[:200]!r}") from None
    if not isinstance(value, dict):
        raise UploadError(status, f"the answer is not a JSON object: {text[:200]!r}")
    return value


def _stored(index: int, ranges: list[tuple[int, int]]) -> bool:
    return any(first <= index <= last for first, last in ranges)


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
