"""Counts and times every request Django answers, labelled by URL pattern (and deployment for
`/api/deployments/<name>/...`). Reward requests answered by inference.fastpath are counted there."""

from __future__ import annotations

import time

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.utils.decorators import sync_and_async_middleware

from common import metrics

UNMATCHED = "<unmatched>"


def _labels(request, status: int) -> tuple[str, str]:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return UNMATCHED, ""
    endpoint = match.route or match.view_name or UNMATCHED
    deployment = ""
    if endpoint.startswith("api/deployments/") and status != 404:
        deployment = str(match.kwargs.get("name", ""))[:100]
    return endpoint, deployment


def _record(request, response, started: float) -> None:
    endpoint, deployment = _labels(request, response.status_code)
    metrics.observe_request(endpoint, request.method, response.status_code, time.perf_counter() - started, deployment)


@sync_and_async_middleware
def request_metrics(get_response):
    if iscoroutinefunction(get_response):

        async def async_middleware(request):
            started = time.perf_counter()
            response = await get_response(request)
            _record(request, response, started)
            return response

        return markcoroutinefunction(async_middleware)

    def middleware(request):
        started = time.perf_counter()
        response = get_response(request)
        _record(request, response, started)
        return response

    return middleware
