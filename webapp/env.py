"""Typed readers for settings that come from environment variables.

Each helper fails loudly (ImproperlyConfigured) on a value it cannot parse, so a typo in
deployment configuration stops the process at start-up instead of misbehaving later.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_cidrs(name: str, default: list[str]) -> list[str]:
    """Comma-separated IP networks (`10.0.0.0/8,127.0.0.1`), each checked; the normalised texts."""
    import ipaddress

    out = []
    for item in env_list(name, default):
        try:
            out.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not an IP network (e.g. 10.0.0.0/8 or 127.0.0.1)"
            ) from None
    return out


def env_path(name: str, default: Path) -> Path:
    raw = os.environ.get(name)
    return Path(raw).expanduser().resolve() if raw else default


def secret_key(name: str, keep_file: Path) -> str:
    """The secret key from the environment, else one generated once and kept in `keep_file`."""
    raw = os.environ.get(name)
    if raw:
        return raw
    if keep_file.exists():
        return keep_file.read_text().strip()
    keep_file.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    keep_file.write_text(key)
    keep_file.chmod(0o600)
    return key


def env_rate(name: str, default: str) -> str:
    """A rate limit in the `limits` notation ("100/second", "30 per 10 seconds"); empty turns it off."""
    raw = os.environ.get(name, default).strip()
    if raw:
        from limits import parse

        try:
            parse(raw)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}={raw!r} is not a rate such as '100/second' or '30 per 10 seconds'"
            ) from None
    return raw


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name, default).strip()
    if raw not in choices:
        raise ImproperlyConfigured(f"{name}={raw!r} must be one of {', '.join(repr(c) for c in choices)}")
    return raw


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def bound_to_loopback() -> bool:
    """Whether the web server listens on this machine only (RS_HOST, the run command's bind address)."""
    return os.environ.get("RS_HOST", "127.0.0.1").strip() in LOOPBACK_HOSTS
