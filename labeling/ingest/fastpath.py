"""ASGI fast path for agents' ingest calls, in front of Django:

- `POST /api/episodes` (JSON): create an episode (idempotent by UUID);
- `POST /api/episodes/<uuid>/steps` with `Content-Type: application/x-rs-steps` (robot_agent.chunk_format);
- `POST /api/episodes/<uuid>/finish` (JSON).

Agents upload at the rate they record; Django's request cycle (a thread per request, the middleware chain,
a token query per request, DRF's parsers, FileSystemStorage's save) cost far more CPU than storing the
frames. This wrapper answers exactly those requests, when they carry a Bearer token, on the event loop with
the same rules as the DRF views: the cached token lookup and limits the rewards fast path uses
(projects.gate.admission: the per-token API rate and the bad-request limit, one Redis round trip for both),
the views' own serializers and access checks (ingest rights in the project, an agent's own episode), the body and chunk
limits, header-only image checks (labeling.ingest.chunks) and the same all-or-nothing, idempotent services.
A chunk's body is read (up to DATA_UPLOAD_MAX_MEMORY_SIZE, a larger Content-Length is refused unread) once
its token is known and within its rate; the episode's access checks then run on its locked row, with the
writes.
Errors have the API's usual body (`detail`, and `errors` for field errors). The database and file writes
run on a few writer threads that keep their database connection (INGEST_WRITER_THREADS), never on the loop;
so do token lookups that miss the cache (no connection opened per lookup), and each writer connection
commits ingest transactions without waiting for the WAL flush for its whole session (labeling.ingest.services).
Everything else (multipart and JSON chunks, sessions, every other URL) goes to the wrapped application.

It sits in webapp (the layer that composes the apps) because it joins labeling's ingest with the serving
core's token cache and limits; webapp/asgi.py puts it in front of Django for every web process.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid as uuid_lib
from collections.abc import Callable
from functools import lru_cache

from django.conf import settings
from rest_framework import exceptions
from rest_framework.utils.encoders import JSONEncoder

from common import metrics
from common.asgi_http import HttpError, declared_length, header_map, read_body, respond_json
from common.db_bridge import DatabaseThreads
from common.errors import exception_handler
from common.parsers import json_body
from labeling import permissions as labeling_perms
from labeling.ingest import services
from labeling.ingest.api import ingest_project
from labeling.ingest.chunks import ChunkRefused, IngestLimits, chunk_steps
from labeling.ingest.serializers import EpisodeCreateIn, EpisodeOut, FinishIn
from labeling.labels import ownership
from labeling.models import Episode
from projects import access
from projects.gate.admission import admitted_agent
from projects.gate.limits import client_key
from projects.gate.throttles import api_limit, bad_request_limit, limiter
from robot_agent.chunk_format import CONTENT_TYPE

UUID = r"(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"  # as Django's <uuid:>
JSON = "application/json"
# (path pattern, content type, handler name, the URL pattern's label in rs_http_requests)
ROUTES = [
    (re.compile(rf"^/api/episodes/{UUID}/steps$"), CONTENT_TYPE, "_append", "api/episodes/<uuid:uuid>/steps"),
    (re.compile(r"^/api/episodes$"), JSON, "_create", "api/episodes"),
    (re.compile(rf"^/api/episodes/{UUID}/finish$"), JSON, "_finish", "api/episodes/<uuid:uuid>/finish"),
]
BODY_LIMIT = "DATA_UPLOAD_MAX_MEMORY_SIZE"
log = logging.getLogger(__name__)


class Answer(Exception):
    """An error answer with the API's usual body."""

    def __init__(self, status: int, body: dict, retry_after: int = 0):
        super().__init__(body.get("detail", ""))
        self.status, self.body, self.retry_after = status, body, retry_after


class IngestFastPath:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        route = _route(scope["path"])
        if route is None:
            return await self.app(scope, receive, send)
        pattern, content_type, handler, endpoint = route
        headers = header_map(scope)
        authorization = headers.get("authorization", "")
        if headers.get("content-type", "").split(";")[0].strip().lower() != content_type or not authorization:
            return await self.app(scope, receive, send)  # DRF answers these (and their errors)
        client = client_key(authorization, (scope.get("client") or ("", 0))[0])
        started = time.perf_counter()
        retry_after = 0
        try:
            agent = await admitted_agent(
                authorization, client, api_limit(), "api", "API rate limit reached for this token", _on_writer
            )  # a writer's connection stays open: no connect per token lookup
            match = pattern.match(scope["path"])
            assert match is not None
            status, body = await getattr(self, handler)(agent, match.groupdict().get("uuid"), receive, headers)
        except (HttpError, Answer) as exc:
            if isinstance(exc, HttpError):
                status, body, retry_after = exc.status, {"detail": exc.detail}, exc.retry_after
            else:
                status, body, retry_after = exc.status, exc.body, exc.retry_after
            if 400 <= status < 500 and status != 429:
                await limiter().hit(bad_request_limit(), "bad:" + client)
        except Exception:
            log.exception("an ingest request failed on the fast path")
            status, body = 500, {"detail": "server error; nothing of this request was kept, retry it"}
        await respond_json(send, status, body, retry_after, encoder=JSONEncoder)
        metrics.observe_request(endpoint, "POST", status, time.perf_counter() - started)

    async def _append(self, agent, episode_ref: str, receive, headers: dict) -> tuple[int, dict]:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared_length(headers, limit, BODY_LIMIT)
        body = await read_body(receive, limit, BODY_LIMIT)
        # one hop to a writer thread for the checks and the writes: each hop is a wake-up to wait for
        result = await _on_writer(_store_chunk, agent, episode_ref, body)
        return 200, {"created": result.created, "skipped": result.skipped, "num_steps": result.num_steps}

    async def _create(self, agent, _ref, receive, headers: dict) -> tuple[int, dict]:
        data = await _json_body(receive, headers)
        return await _on_writer(_create_episode, agent, data)

    async def _finish(self, agent, episode_ref: str, receive, headers: dict) -> tuple[int, dict]:
        data = await _json_body(receive, headers)
        return await _on_writer(_finish_episode, agent, episode_ref, data)


def _route(path: str):
    if not path.startswith("/api/episodes"):
        return None
    return next((route for route in ROUTES if route[0].match(path)), None)


async def _json_body(receive, headers: dict):
    limit = settings.MAX_JSON_BODY_BYTES
    declared_length(headers, limit, "MAX_JSON_BODY_BYTES")
    raw = await read_body(receive, limit, "MAX_JSON_BODY_BYTES")
    if not raw:
        return {}
    try:
        return json_body(raw)  # as DRF's parser: within JSON_MAX_DEPTH, no NaN
    except exceptions.ParseError as exc:
        raise HttpError(400, str(exc.detail)) from None


@lru_cache(maxsize=1)
def _limits() -> IngestLimits:
    return IngestLimits.from_settings()


@lru_cache(maxsize=1)
def _writers() -> DatabaseThreads:
    return DatabaseThreads("ingest-writer", settings.INGEST_WRITER_THREADS, prepare=services.ingest_session_commit_mode)


async def _on_writer(function, *args):
    """`function(*args)` on a writer thread, whose connection stays open between requests (no connect per
    chunk); a dropped one is replaced and the call repeated, which is safe because every ingest call is
    idempotent and all-or-nothing. DRF's exceptions become the API's usual error answers."""
    return await _writers().call(_answering, function, *args, retry=True)


def _answering(function, *args):
    try:
        return function(*args)
    except exceptions.APIException as exc:
        response = exception_handler(exc, {})
        assert response is not None  # DRF's handler answers every APIException
        raise Answer(response.status_code, dict(response.data)) from None


def _may_write(agent) -> Callable[[Episode], None]:
    """As the views' `_episode`: ingest rights in the episode's project, and an agent's own episode."""

    def check(episode: Episode) -> None:
        access.require(agent, labeling_perms.INGEST, episode.project)
        ownership.require_own_episode(agent, episode)

    return check


def _store_chunk(agent, episode_ref: str, body: bytes) -> services.AppendResult:
    try:
        steps = chunk_steps(body, _limits())
    except ChunkRefused as exc:
        raise HttpError(exc.status, str(exc)) from None
    try:
        return services.steps_append(episode=uuid_lib.UUID(episode_ref), steps=steps, check=_may_write(agent))
    except Episode.DoesNotExist:
        raise exceptions.NotFound() from None
    except services.IngestConflict as exc:
        raise HttpError(409, str(exc)) from None
    except services.IngestError as exc:
        raise HttpError(400, str(exc)) from None


def _create_episode(agent, data) -> tuple[int, dict]:
    """As EpisodeCreateView.post."""
    serializer = EpisodeCreateIn(data=data)
    serializer.is_valid(raise_exception=True)
    values = serializer.validated_data
    try:
        episode, created = services.episode_create(
            project=ingest_project(values["project"], agent),
            uuid=values["uuid"],
            source=values["source"],
            agent=agent,
            env_id=values["env_id"],
            metadata=values["metadata"],
        )
    except services.IngestConflict as exc:
        raise HttpError(409, str(exc)) from None
    ownership.require_own_episode(agent, episode)
    if not created:
        return 200, _episode_data(episode)
    return 201, _episode_data(episode, num_frames=0)  # a new episode has no frames yet


def _finish_episode(agent, episode_ref: str, data) -> tuple[int, dict]:
    """As EpisodeFinishView.post."""
    serializer = FinishIn(data=data)
    serializer.is_valid(raise_exception=True)
    try:
        finished = services.episode_finish(
            episode=uuid_lib.UUID(episode_ref), check=_may_write(agent), **serializer.validated_data
        )
    except Episode.DoesNotExist:
        raise exceptions.NotFound() from None
    if finished.agent_id == agent.pk:
        finished.agent = agent  # already loaded: the answer needs no query for it
    return 200, _episode_data(finished)


_serializers = threading.local()


def _episode_data(episode: Episode, **context) -> dict:
    """`EpisodeOut(episode, context=context).data`, from one serializer per writer thread. A
    ModelSerializer builds its fields anew for every instance (a deep copy of each declared field, a field
    built from each model field), which costs more CPU than the answer itself; a thread's own serializer
    builds them once and only its context changes between calls."""
    serializer = getattr(_serializers, "episode", None)
    if serializer is None:
        _serializers.context = {}
        serializer = _serializers.episode = EpisodeOut(context=_serializers.context)
    current: dict = _serializers.context  # the serializer's context (the same dict)
    current.clear()
    current.update(context)
    return serializer.to_representation(episode)
