"""ASGI entry point: HTTP goes to Django, WebSockets to Channels consumers.

Reward requests with an `.npy` body (`POST /api/deployments/<name>/rewards`) are answered on the event
loop by inference.fastpath before Django's per-request thread and middleware; everything else reaches
Django unchanged.

People authenticate WebSockets with their session; agents with `Authorization: Bearer <token>`
(or `?token=` for clients that cannot set headers), resolved by AgentTokenMiddleware.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from inference.fastpath import RewardsFastPath  # noqa: E402
from labeling.auth import AgentTokenMiddleware  # noqa: E402

from .routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": RewardsFastPath(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(AgentTokenMiddleware(URLRouter(websocket_urlpatterns())))
        ),
    }
)
