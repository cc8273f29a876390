"""ASGI entry point: HTTP goes to Django, WebSockets to Channels consumers.

Reward requests with an `.npy` body (`POST /api/deployments/<name>/rewards`) are answered on the event
loop by inference.fastpath, and binary step chunks (`POST /api/episodes/<uuid>/steps`,
`application/x-rs-steps`) by labeling.ingest.fastpath, before Django's per-request thread and
middleware; everything else reaches Django, its body bounded first (webapp.security.body_limit: 413 at once past
MAX_JSON_BODY_BYTES for JSON, MAX_REQUEST_BODY_BYTES for the rest).

Behind reverse proxies listed in `FORWARDED_ALLOW_IPS`, the client's address (for `TRUSTED_CIDRS` and rate
limits) is read from their `X-Forwarded-For` (webapp.security.proxy_headers); run uvicorn with `--no-proxy-headers`, as
the Procfile does, so that uvicorn's own default (believing the header from 127.0.0.1) does not apply.

People authenticate WebSockets with their session; agents with `Authorization: Bearer <token>`
(never in the URL), resolved by AgentTokenMiddleware. A browser's Origin must be an allowed host; a
token-authenticated agent may leave Origin out (webapp.security.ws_origin).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.files.storage import default_storage  # noqa: E402

from common.object_reads import object_client_warm_up  # noqa: E402
from common.parent_death import exit_with_parent  # noqa: E402
from inference.fastpath import RewardsFastPath  # noqa: E402
from labeling.ingest.fastpath import IngestFastPath  # noqa: E402
from projects.auth import AgentTokenMiddleware  # noqa: E402
from webapp.security.body_limit import BodyLimit  # noqa: E402
from webapp.security.proxy_headers import behind_proxies  # noqa: E402
from webapp.security.ws_origin import AgentOrAllowedOriginValidator  # noqa: E402

from .routing import websocket_urlpatterns  # noqa: E402


def _warn_about_redis_memory() -> None:
    """At start: say so if Redis could evict queued work (see docs/operations.md, "Limits and production settings")."""
    import logging

    import redis
    from django.conf import settings

    from inference.broker import check_memory_policy

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    check_memory_policy(client, logging.getLogger("webapp"))
    client.close()


_warn_about_redis_memory()


def _close_stale_teleop_sessions() -> None:
    """At start, in a thread (uvicorn loads the app inside its event loop): teleop sessions a dead process
    left marked live are closed (inference.teleop.services.sessions_close_stale)."""
    import logging
    import threading

    from django.db import connection

    from inference.teleop.services import sessions_close_stale

    def sweep() -> None:
        try:
            closed = sessions_close_stale()
            if closed:
                logging.getLogger("webapp").warning("closed %d teleop sessions left live by a stopped process", closed)
        except Exception:
            logging.getLogger("webapp").exception("closing stale teleop sessions failed")
        finally:
            connection.close()

    threading.Thread(target=sweep, name="teleop-stale-sweep", daemon=True).start()


_close_stale_teleop_sessions()
object_client_warm_up(default_storage)  # frames on an object store: its client made before the first page asks
exit_with_parent()  # a web process of `uvicorn --workers`: it ends with the parent (common.parent_death)


def _forwarded_allow_ips() -> list[str]:
    from django.conf import settings

    return settings.FORWARDED_ALLOW_IPS


application = behind_proxies(
    ProtocolTypeRouter(
        {
            "http": IngestFastPath(RewardsFastPath(BodyLimit(django_asgi_app))),
            "websocket": AgentOrAllowedOriginValidator(
                AuthMiddlewareStack(AgentTokenMiddleware(URLRouter(websocket_urlpatterns())))
            ),
        }
    ),
    _forwarded_allow_ips(),
)
