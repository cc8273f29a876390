"""The client's address behind reverse proxies (no Django).

Behind a proxy the TCP peer is the proxy, so `TRUSTED_CIDRS` and the per-address rate limits would see the
proxy's address for everyone. uvicorn's ProxyHeadersMiddleware puts the address from `X-Forwarded-For`
(and the scheme from `X-Forwarded-Proto`) into `scope["client"]` (Django's `REMOTE_ADDR`) when, and only
when, the peer is one of the proxies listed in `FORWARDED_ALLOW_IPS`; with a chain of proxies it takes the
right-most address that is not a listed proxy, so a client cannot choose its own address by sending the
header itself. With no proxy listed the header is ignored: the peer is the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware


def behind_proxies(app: Any, proxies: Sequence[str]) -> Any:
    """`app` reading the client's address from the listed proxies' headers; `app` itself when none is listed."""
    if not proxies:
        return app
    return ProxyHeadersMiddleware(app, trusted_hosts=list(proxies))
