"""POST to a checked webhook target's address, never resolving its name again. No Django.

urllib3's connection pool connects to the address it is given; the name goes in the Host header and, for
https, in SNI and the certificate's host name check (`server_hostname`), so TLS still proves the name.
No redirects are followed and no retries made (the delivery task retries with backoff); at most `keep`
bytes of the answer are read.
"""

from __future__ import annotations

from dataclasses import dataclass

import urllib3

from .targets import Target


@dataclass(frozen=True)
class Answer:
    status: int
    text: str


def post_pinned(target: Target, body: bytes, headers: dict[str, str], *, timeout: float, keep: int) -> Answer:
    """POST `body` to `target.address`; the answer's status and its first `keep` bytes as text. Raises
    urllib3.exceptions.HTTPError when no answer comes (refused, timed out, TLS failed)."""
    default_port = 443 if target.scheme == "https" else 80
    host_header = target.host if target.port == default_port else f"{target.host}:{target.port}"
    if ":" in target.host and target.port == default_port:  # an IPv6 literal host
        host_header = f"[{target.host}]"
    elif ":" in target.host:
        host_header = f"[{target.host}]:{target.port}"
    pool: urllib3.HTTPConnectionPool
    if target.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            target.address, target.port, server_hostname=target.host, cert_reqs="CERT_REQUIRED", maxsize=1
        )
    else:
        pool = urllib3.HTTPConnectionPool(target.address, target.port, maxsize=1)
    try:
        response = pool.urlopen(
            "POST",
            target.path,
            body=body,
            headers={**headers, "Host": host_header},
            timeout=urllib3.Timeout(connect=timeout, read=timeout),
            retries=False,
            redirect=False,
            preload_content=False,
        )
        try:
            data = response.read(keep, decode_content=True)
        finally:
            response.release_conn()
        return Answer(response.status, data[:keep].decode("utf-8", errors="replace"))
    finally:
        pool.close()
