"""Trusted networks: which client addresses may reach deployments without a token. No Django.

RLinf's API reward worker (`rlinf/utils/http_client.py`) posts to `/v1/chat/completions` and probes
`/health` with no Authorization header at all. An admin lists the networks such workers run in
(`TRUSTED_CIDRS`, default none; e.g. `127.0.0.1/32,::1/128` for a worker on the same machine); requests
from those addresses that carry no token reach the deployments' reward, chat and health endpoints.
Everyone else authenticates with a token as before. The address is the TCP peer (`REMOTE_ADDR`), or behind
a reverse proxy listed in `FORWARDED_ALLOW_IPS` the client named by its X-Forwarded-For (webapp.security.proxy_headers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from functools import lru_cache

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks_parse(values: Iterable[str]) -> list[Network]:
    """`["10.0.0.0/8", "127.0.0.1"]` -> networks; ValueError naming the bad entry."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP network (write e.g. 10.0.0.0/8 or 127.0.0.1)") from None
    return out


@lru_cache(maxsize=8)
def networks_cached(values: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(networks_parse(values))


def address_trusted(address: str | None, networks: Iterable[Network]) -> bool:
    """Whether `address` (an IPv4/IPv6 literal, IPv4-mapped IPv6 included) lies in one of `networks`."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.strip().split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == net.version and ip in net for net in networks)
