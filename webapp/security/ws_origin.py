"""WebSocket Origin check: browsers from other sites are refused, token-authenticated agents pass.

Browsers always send `Origin` with a WebSocket handshake, so a page on another site cannot open a
socket with a person's session cookie: its Origin must be one of ALLOWED_HOSTS (Channels'
AllowedHostsOriginValidator). Robots and simulators are not browsers and often send no Origin; a
handshake without one is let through when it carries `Authorization: Bearer <token>` (the consumer then
checks the token), as robot_agent/PROTOCOL.md says. A handshake without Origin and without a token is
refused like a bad origin.
"""

from __future__ import annotations

from channels.security.websocket import AllowedHostsOriginValidator


def _headers(scope) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope.get("headers", [])}


class AgentOrAllowedOriginValidator:
    def __init__(self, inner):
        self.inner = inner
        self.browser_check = AllowedHostsOriginValidator(inner)

    async def __call__(self, scope, receive, send):
        headers = _headers(scope)
        if b"origin" not in headers and headers.get(b"authorization", b"").lower().startswith(b"bearer "):
            return await self.inner(scope, receive, send)
        return await self.browser_check(scope, receive, send)
