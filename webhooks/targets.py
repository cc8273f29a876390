"""Where a webhook may point: a public address, unless WEBHOOK_ALLOW_PRIVATE_TARGETS says otherwise. No Django.

A webhook makes this server POST to a URL an admin typed; pointed at loopback, link-local (cloud metadata at
169.254.169.254) or a private network it would reach services that trust this host. The host name is resolved
and every address it resolves to is checked (one private address is enough to refuse it).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urlsplit


class TargetRefused(ValueError):
    """A URL this server will not send webhooks to; the message says why."""


def _addresses(host: str, port: int, resolve: Callable) -> list[str]:
    try:
        return sorted({info[4][0] for info in resolve(host, port, type=socket.SOCK_STREAM)})
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"host {host!r} does not resolve: {exc}") from None


def target_check(url: str, *, allow_private: bool, resolve: Callable = socket.getaddrinfo) -> None:
    """Raise TargetRefused unless every address `url`'s host resolves to is public (or `allow_private`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused("the URL must be http:// or https:// with a host")
    if allow_private:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TargetRefused("the URL's port is not a number from 0 to 65535") from None
    for text in _addresses(parts.hostname, port, resolve):
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if not address.is_global or address.is_multicast:
            raise TargetRefused(
                f"{parts.hostname} resolves to {address}, a loopback, link-local, private or reserved address; "
                "webhooks go to public addresses unless WEBHOOK_ALLOW_PRIVATE_TARGETS is set"
            )
