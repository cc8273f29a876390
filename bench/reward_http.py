"""A lean RL worker for the serving benches: the rewards endpoint over one keep-alive HTTP connection.

An RL worker sends a frame, waits for its reward and sends the next one, over and over; what the bench
measures is the service, so its client should cost as little CPU as a tight RL loop's would. This one
speaks HTTP/1.1 with the standard library (`http.client`, no `requests` session machinery), keeps its
connection open, and sends `.npy` bodies the caller encoded once (the bench reuses a few frames). Each
call is still a real reward request: `POST /api/deployments/<name>/rewards`, the agent's Bearer token,
`Content-Type: application/x-npy`, the JSON answer parsed and its rewards returned.
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit


class LeanRewardClient:
    def __init__(self, base_url: str, token: str, deployment: str, timeout: float = 60.0):
        parts = urlsplit(base_url)
        self.host, self.port, self.timeout = parts.hostname or "127.0.0.1", parts.port or 80, timeout
        self.path = f"/api/deployments/{deployment}/rewards"
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-npy"}
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def rewards(self, body: bytes) -> list[float]:
        """The rewards for one `.npy` body (uint8 [B,H,W,3]); RuntimeError for an HTTP error."""
        return [item["reward"] for item in self.items(body)]

    def items(self, body: bytes) -> list[dict]:
        """The answer's items (probability, reward, ...) for one `.npy` body; RuntimeError for an HTTP error."""
        try:
            status, data = self._post(body)
        except (ConnectionError, http.client.HTTPException):  # the server closed the kept-alive connection
            self.connection.close()
            self.connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            status, data = self._post(body)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {data[:300]!r}")
        return json.loads(data)["items"]

    def _post(self, body: bytes) -> tuple[int, bytes]:
        self.connection.request("POST", self.path, body=body, headers=self.headers)
        response = self.connection.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self.connection.close()
