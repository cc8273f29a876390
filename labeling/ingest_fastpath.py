"""ASGI fast path for step chunks in the binary format: `POST /api/episodes/<uuid>/steps` with
`Content-Type: application/x-rs-steps` (robot_agent.chunk_format) and a Bearer token.

Agents upload at the rate they record; Django's request cycle (a thread per request, the middleware
chain, DRF's parsers and serializers, FileSystemStorage's save) cost far more CPU than storing the frames.
This wrapper answers exactly those requests on the event loop with the same rules as the DRF view:
the cached token lookup and limits the rewards fast path uses (inference.auth, inference.throttles: the
per-token API rate and the bad-request limit), ingest rights in the episode's project and an agent's own
episode (labeling.access), the body and chunk limits, header-only image checks (labeling.ingest_chunks)
and the same all-or-nothing, idempotent `services.steps_append`. The database and file writes run on a
few writer threads that keep their database connection (INGEST_WRITER_THREADS), never on the loop.
Everything else (multipart and JSON chunks, sessions, every other URL) goes to the wrapped application.

webapp/asgi.py puts it in front of Django for every web process.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid as uuid_lib
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from django.conf import settings
from django.db import connection
from rest_framework import exceptions

from inference.auth import MALFORMED, UNKNOWN, acached_agent
from inference.limits import client_key, too_many
from inference.throttles import alimiter, api_limit, bad_request_limit
from robot_agent.chunk_format import CONTENT_TYPE
from webapp import metrics
from webapp.asgi_http import HttpError, declared_length, header_map, read_body, respond_json

from . import access, services
from .ingest_chunks import ChunkRefused, IngestLimits, chunk_steps
from .models import Episode
from .tokens import token_from_header

ROUTE = re.compile(r"^/api/episodes/(?P<uuid>[0-9a-fA-F-]{32,36})/steps/?$")
ENDPOINT = "api/episodes/<uuid:uuid>/steps"  # the URL pattern's label in rs_http_requests
BODY_LIMIT = "DATA_UPLOAD_MAX_MEMORY_SIZE"
log = logging.getLogger(__name__)


class IngestFastPath:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        match = ROUTE.match(scope["path"])
        if match is None:
            return await self.app(scope, receive, send)
        headers = header_map(scope)
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        authorization = headers.get("authorization", "")
        if content_type != CONTENT_TYPE or not authorization:
            return await self.app(scope, receive, send)  # DRF answers these (and their errors)
        client = client_key(authorization, (scope.get("client") or ("", 0))[0])
        started = time.perf_counter()
        retry_after = 0
        try:
            status, body = 200, await self._append(match["uuid"], receive, headers, client)
        except HttpError as exc:
            status, body, retry_after = exc.status, {"detail": exc.detail}, exc.retry_after
            if 400 <= status < 500 and status != 429:
                await alimiter().hit(bad_request_limit(), "bad:" + client)
        except Exception:
            log.exception("storing a binary step chunk failed")
            status, body = 500, {"detail": "the chunk could not be stored (server error); nothing was kept, retry it"}
        await respond_json(send, status, body, retry_after)
        metrics.observe_request(ENDPOINT, "POST", status, time.perf_counter() - started)

    async def _append(self, episode_ref: str, receive, headers: dict, client: str) -> dict:
        verdict = await alimiter().check(bad_request_limit(), "bad:" + client)
        if not verdict.allowed:
            raise HttpError(
                429, too_many(verdict, "too many bad requests from this client; fix them"), verdict.retry_after
            )
        token = token_from_header(headers["authorization"])
        if token is None:
            raise HttpError(401, MALFORMED)
        agent = await acached_agent(token)
        if agent is None:
            raise HttpError(401, UNKNOWN)
        verdict = await alimiter().hit(api_limit(), f"api:a{agent.pk}")  # the key DRF's ApiRateThrottle counts
        if not verdict.allowed:
            raise HttpError(429, too_many(verdict, "Request was throttled."), verdict.retry_after)
        try:
            episode_uuid = uuid_lib.UUID(episode_ref)
        except ValueError:
            raise HttpError(404, "Not found.") from None
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared_length(headers, limit, BODY_LIMIT)
        episode = await _on_writer(_writable_episode, agent, episode_uuid)
        body = await read_body(receive, limit, BODY_LIMIT)
        try:
            steps = await asyncio.to_thread(chunk_steps, body, _limits())
        except ChunkRefused as exc:
            raise HttpError(exc.status, str(exc)) from None
        del body
        result = await _on_writer(_append_steps, episode, steps)
        return {"created": result.created, "skipped": result.skipped, "num_steps": result.num_steps}


@lru_cache(maxsize=1)
def _limits() -> IngestLimits:
    return IngestLimits.from_settings()


@lru_cache(maxsize=1)
def _writers() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=settings.INGEST_WRITER_THREADS, thread_name_prefix="ingest-writer")


async def _on_writer(function, *args):
    return await asyncio.get_running_loop().run_in_executor(_writers(), _with_connection, function, args)


def _with_connection(function, args):
    """Run on a writer thread. Its connection stays open between chunks (no connect per chunk); one that
    saw an error and no longer answers is closed, so the next chunk connects afresh."""
    try:
        return function(*args)
    finally:
        if connection.errors_occurred:
            if connection.connection is not None and connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()


def _writable_episode(agent, episode_uuid) -> Episode:
    episode = Episode.objects.select_related("project").filter(uuid=episode_uuid).first()
    if episode is None:
        raise HttpError(404, "Not found.")
    try:
        access.require(agent, access.INGEST, episode.project)
        access.require_own_episode(agent, episode)
    except exceptions.APIException as exc:
        raise HttpError(exc.status_code, str(exc.detail)) from None
    return episode


def _append_steps(episode: Episode, steps: list[services.StepInput]) -> services.AppendResult:
    try:
        return services.steps_append(episode=episode, steps=steps)
    except services.IngestConflict as exc:
        raise HttpError(409, str(exc)) from None
    except services.IngestError as exc:
        raise HttpError(400, str(exc)) from None
