"""`GET /api/shm`: whether a client may send its frames through shared memory, and how (inference.shm.frames).

The answer tells the caller this machine's boot id (a client on another machine, or a VM, sees another
one and stays on HTTP), the key its segment names must carry, and how many inference workers run on this
machine (the worker reads the frames; none here: use HTTP). The proof that the client shares this
machine's memory is its first same-host request: the web process opens the named segment or answers
400, and the client goes on over HTTP.
"""

from __future__ import annotations

import json
import socket
import time

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from inference import permissions as inference_perms
from projects import access
from projects.gate.auth import REWARDS_AUTHENTICATION, client_id

from ..broker import WORKER_ALIVE_S, WORKERS_KEY
from ..serving import sync_redis
from .frames import MEDIA_TYPE, boot_id, client_key


def workers_on_host(heartbeats: dict, host: str) -> int:
    """Live inference workers whose id ("<hostname>:<pid>") names this host."""
    now, count = time.time(), 0
    for worker, raw in heartbeats.items():
        name = worker.decode() if isinstance(worker, bytes) else str(worker)
        try:
            fresh = now - float(json.loads(raw).get("at", 0)) < WORKER_ALIVE_S
        except (ValueError, TypeError, AttributeError):
            continue
        count += fresh and name.rsplit(":", 1)[0] == host
    return count


class SameHostView(APIView):
    authentication_classes = REWARDS_AUTHENTICATION

    @extend_schema(
        operation_id="same_host",
        summary="How to send frames through shared memory from this machine",
        responses={
            200: OpenApiResponse(description="enabled, boot_id, key, workers_here, media_type, limits."),
            403: OpenApiResponse(description="The token lacks the `rewards` scope."),
        },
    )
    def get(self, request):
        access.require_token_scope(request.user, inference_perms.REWARDS)
        host = socket.gethostname()
        return Response(
            {
                "enabled": bool(settings.SHM_ENABLED),
                "boot_id": boot_id(),
                "host": host,
                "key": client_key(settings.SECRET_KEY, client_id(request.user)),
                "workers_here": workers_on_host(sync_redis().hgetall(WORKERS_KEY), host),
                "media_type": MEDIA_TYPE,
                "max_side": settings.MAX_IMAGE_SIDE,
                "max_request_pixels": settings.MAX_REQUEST_PIXELS,
            }
        )
