"""The address the app runs on (RS_HOST, RS_PORT), for commands that print follow-up URLs."""

from __future__ import annotations

from django.conf import settings

ANY_HOST = {"0.0.0.0", "::", ""}


def app_url(path: str = "/") -> str:
    """`http://<host>:<port><path>`; a server listening on every interface is reached through 127.0.0.1."""
    host = "127.0.0.1" if settings.RS_HOST in ANY_HOST else settings.RS_HOST
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{settings.RS_PORT}{path}"
