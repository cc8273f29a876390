"""`GET /health`: whether the service can answer inference requests, as an sglang server's probe.

RLinf's `InferenceHTTPClient.health()` (`rlinf/utils/http_client.py`) GETs `<base>/health` with no token
and counts only `status_code == 200` as healthy. Here 200 means Redis answers and at least one inference
worker has sent a recent heartbeat; otherwise 503 says which is missing. Reachable with a token or from a
trusted network (`TRUSTED_CIDRS`), like the chat endpoint it guards.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from projects.gate.auth import DEPLOYMENT_AUTHENTICATION

from .broker import WORKERS_KEY, any_worker_alive
from .serving import sync_redis


class HealthView(APIView):
    authentication_classes = DEPLOYMENT_AUTHENTICATION

    @extend_schema(
        operation_id="health",
        summary="Ready to serve: Redis answers and an inference worker is alive",
        responses={200: OpenApiResponse(description="Ready."), 503: OpenApiResponse(description="Not ready.")},
    )
    def get(self, request):
        try:
            beats = sync_redis().hgetall(WORKERS_KEY)
        except Exception as exc:  # any Redis failure means not ready
            return Response({"status": "unavailable", "detail": f"Redis: {exc}"}, status=503)
        if not any_worker_alive(beats):
            detail = "no inference worker is running; start one with `python manage.py inference_worker`"
            return Response({"status": "unavailable", "detail": detail}, status=503)
        return Response({"status": "ok", "inference_workers": len(beats)})
