"""Where a webhook may point: a public address, unless WEBHOOK_ALLOW_PRIVATE_TARGETS says otherwise. No Django.

A webhook makes this server POST to a URL an admin typed; pointed at loopback, link-local (cloud metadata at
169.254.169.254) or a private network it would reach services that trust this host. The host name is resolved
and every address it resolves to is checked (one private address is enough to refuse it).

The check runs twice: in the admin form, and again at every delivery (`target_resolve`), whose answer names
the checked address the delivery connects to. A name that resolved to a public address when it was saved and
to 127.0.0.1 when it is sent (DNS rebinding) is refused at send time, and a name whose answer changes between
the check and the connection cannot slip through, since the connection never resolves it again.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit


class TargetRefused(ValueError):
    """A URL this server will not send webhooks to; the message says why."""


@dataclass(frozen=True)
class Target:
    """A webhook URL resolved and checked: connect to `address` (never to `host` again), say `host` in the
    Host header and, for https, in SNI and the certificate check."""

    scheme: str
    host: str
    port: int
    address: str
    path: str  # path and query, as sent in the request line


def _addresses(host: str, port: int, resolve: Callable) -> list[str]:
    try:
        return sorted({info[4][0] for info in resolve(host, port, type=socket.SOCK_STREAM)})
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"host {host!r} does not resolve: {exc}") from None


def target_resolve(url: str, *, allow_private: bool, resolve: Callable = socket.getaddrinfo) -> Target:
    """Resolve `url`'s host once and check every address it gives; the target to connect to (its first
    address). Raise TargetRefused unless every address is public (or `allow_private`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused("the URL must be http:// or https:// with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TargetRefused("the URL's port is not a number from 0 to 65535") from None
    addresses = _addresses(parts.hostname, port, resolve)
    if not addresses:
        raise TargetRefused(f"host {parts.hostname!r} resolves to no address")
    for text in addresses if not allow_private else ():
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if not address.is_global or address.is_multicast:
            raise TargetRefused(
                f"{parts.hostname} resolves to {address}, a loopback, link-local, private or reserved address; "
                "webhooks go to public addresses unless WEBHOOK_ALLOW_PRIVATE_TARGETS is set"
            )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, addresses[0], path)


def target_check(url: str, *, allow_private: bool, resolve: Callable = socket.getaddrinfo) -> None:
    """Raise TargetRefused unless every address `url`'s host resolves to is public (or `allow_private`)."""
    target_resolve(url, allow_private=allow_private, resolve=resolve)
