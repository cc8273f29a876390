"""Ingest API: agents create an episode, append steps in atomic chunks, then finish it."""

from __future__ import annotations

import base64
import binascii

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from common.images.budget import ImageTooLarge, PixelBudget
from common.images.checks import CheckedImage, ImageError, check_image
from common.json_limits import JSONTooDeep, loads_bounded, size_of
from common.parsers import BoundedJSONParser, RequestTooLarge
from labeling import permissions as labeling_perms
from labeling.labels import ownership
from projects import access
from projects.models import Agent, Project
from robot_agent.chunk_format import CONTENT_TYPE as CHUNK_CONTENT_TYPE

from ..models import Episode
from . import selectors, services
from .chunks import ChunkRefused, IngestLimits, chunk_steps
from .serializers import (
    AppendResultOut,
    EpisodeCreateIn,
    EpisodeOut,
    FinishIn,
    StepChunkIn,
    StepIn,
    StoredStepsOut,
)


def ingest_project(ref: str, actor) -> Project:
    """The project named by id or name among those the caller may see (others look like no project)."""
    projects = access.visible_projects(actor)
    project = projects.filter(pk=int(ref)).first() if ref.isdigit() else None
    project = project or projects.filter(name=ref).first()
    if project is None:
        raise ValidationError({"project": [f"no project with id or name {ref!r}"]})
    access.require(actor, labeling_perms.INGEST, project)
    return project


def _episode(request, uuid) -> Episode:
    """An episode the caller may write: ingest rights in its project, and an agent's own episode."""
    episode = get_object_or_404(Episode.objects.select_related("project"), uuid=uuid)
    access.require(request.user, labeling_perms.INGEST, episode.project)
    ownership.require_own_episode(request.user, episode)
    return episode


def _agent(request) -> Agent | None:
    return request.user if isinstance(request.user, Agent) else None


class EpisodeCreateView(APIView):
    parser_classes = [BoundedJSONParser]

    @extend_schema(
        request=EpisodeCreateIn,
        responses={200: EpisodeOut, 201: EpisodeOut},
        summary="Create an episode (idempotent by uuid)",
    )
    def post(self, request):
        data = EpisodeCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        try:
            episode, created = services.episode_create(
                project=ingest_project(values["project"], request.user),
                uuid=values["uuid"],
                source=values["source"],
                agent=_agent(request),
                env_id=values["env_id"],
                metadata=values["metadata"],
            )
        except services.IngestConflict as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        ownership.require_own_episode(request.user, episode)
        return Response(EpisodeOut(episode).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class EpisodeDetailView(APIView):
    @extend_schema(responses=EpisodeOut, summary="An episode's state (steps stored so far, status)")
    def get(self, request, uuid):
        episode = get_object_or_404(Episode.objects.select_related("project"), uuid=uuid)
        access.require(request.user, labeling_perms.EPISODE_READ, episode.project)
        return Response(EpisodeOut(episode).data)


class BinaryChunkParser(BaseParser):
    """The binary step chunk (robot_agent.chunk_format), up to DATA_UPLOAD_MAX_MEMORY_SIZE. Agents' chunks
    are answered before Django by labeling.ingest.fastpath; this serves everyone else (sessions) alike."""

    media_type = CHUNK_CONTENT_TYPE

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(f"body larger than {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)")
        return {"chunk": raw}


class StepChunkView(APIView):
    parser_classes = [BinaryChunkParser, MultiPartParser, BoundedJSONParser]

    @extend_schema(
        request={
            "multipart/form-data": StepChunkIn,
            "application/json": StepChunkIn,
            CHUNK_CONTENT_TYPE: {"type": "string", "format": "binary"},
        },
        responses=AppendResultOut,
        summary="Append a chunk of steps (atomic; retries skip stored steps)",
        description="Three body formats: the binary chunk (`application/x-rs-steps`, robot_agent/chunk_format.py: "
        "the fastest, one body per chunk, PNGs never decoded), multipart (a `steps` JSON field and files named "
        "`frame.<index>.<camera>`) or JSON with base64 images.",
        examples=[
            OpenApiExample(
                "JSON chunk",
                request_only=True,
                value={
                    "steps": [
                        {
                            "index": 0,
                            "action": [0.0, 0.1],
                            "reward": 0.0,
                            "success": False,
                            "images": {"main": "<base64 PNG>"},
                        }
                    ]
                },
            )
        ],
    )
    def post(self, request, uuid):
        episode = _episode(request, uuid)
        steps = self._parse(request)
        try:
            result = services.steps_append(episode=episode, steps=steps)
        except services.IngestConflict as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        except services.IngestError as exc:
            raise ValidationError({"steps": [str(exc)]}) from None
        return Response(AppendResultOut(result).data)

    @extend_schema(
        responses=StoredStepsOut,
        summary="The steps stored so far (what an interrupted upload still has to send)",
    )
    def get(self, request, uuid):
        episode = _episode(request, uuid)
        ranges = selectors.episode_stored_ranges(episode=episode)
        num_steps = sum(last - first + 1 for first, last in ranges)
        return Response(StoredStepsOut({"num_steps": num_steps, "ranges": ranges}).data)

    def _parse(self, request) -> list[services.StepInput]:
        if request.content_type.split(";")[0].strip() == CHUNK_CONTENT_TYPE:
            try:
                return chunk_steps(request.data["chunk"], IngestLimits.from_settings())
            except ChunkRefused as exc:
                if exc.status == 413:
                    raise RequestTooLarge(str(exc)) from None
                raise ValidationError({"steps": [str(exc)]}) from None
        raw_steps = request.data.get("steps")
        multipart = request.content_type.startswith("multipart/")
        if multipart and isinstance(raw_steps, str):
            raw_steps = _multipart_steps(raw_steps)
        if not isinstance(raw_steps, list) or not raw_steps:
            raise ValidationError({"steps": ["a non-empty list of steps is required"]})
        if not multipart:
            _json_header_check(raw_steps)
        if len(raw_steps) > settings.INGEST_MAX_STEPS_PER_CHUNK:
            raise RequestTooLarge(
                f"{len(raw_steps)} steps in one chunk; the limit is {settings.INGEST_MAX_STEPS_PER_CHUNK} "
                "(INGEST_MAX_STEPS_PER_CHUNK)"
            )
        limits = {"max_side": settings.MAX_IMAGE_SIDE, "max_pixels": settings.MAX_IMAGE_PIXELS}
        files = request.FILES if multipart else {}
        validated = []
        for position, raw in enumerate(raw_steps):
            serializer = StepIn(data=raw)
            if not serializer.is_valid():
                field, messages = next(iter(serializer.errors.items()))
                label = raw.get("index", position) if isinstance(raw, dict) else position
                raise ValidationError({"steps": [f"step {label}: {field}: {_first(messages)}"]})
            validated.append(serializer.validated_data)
        # Count the chunk's images and read their header sizes before any image is checked or decoded.
        budget = PixelBudget(
            max_side=settings.MAX_IMAGE_SIDE,
            max_pixels=settings.MAX_IMAGE_PIXELS,
            max_request_pixels=settings.MAX_REQUEST_PIXELS,
            max_images=settings.INGEST_MAX_IMAGES_PER_CHUNK,
        )
        try:
            budget.count(sum(len(values["images"]) for values in validated) + len(files))
        except ImageTooLarge as exc:
            raise RequestTooLarge(f"{exc} (INGEST_MAX_IMAGES_PER_CHUNK)") from None
        raw_images = {}
        for values in validated:
            for camera, text in values.pop("images").items():
                raw_images[(values["index"], camera)] = self._decode_b64(values["index"], camera, text)
        for name, upload in files.items():
            parts = name.split(".", 2)
            if len(parts) != 3 or parts[0] != "frame" or not parts[1].isdigit():
                raise ValidationError({"files": [f"file field {name!r}: name files frame.<index>.<camera>"]})
            index, camera = int(parts[1]), parts[2]
            if index not in {values["index"] for values in validated}:
                raise ValidationError({"files": [f"file {name!r}: step {index} is not in this chunk"]})
            raw_images[(index, camera)] = upload.read()
        for (index, camera), raw in raw_images.items():
            try:
                budget.charge(raw)
            except ImageTooLarge as exc:
                raise RequestTooLarge(f"step {index}: images.{camera}: {exc}") from None
            except ImageError as exc:
                raise ValidationError({"steps": [f"step {index}: images.{camera}: {exc}"]}) from None
        parsed = [services.StepInput(**values, images={}) for values in validated]
        by_index = {step.index: step for step in parsed}
        for (index, camera), raw in raw_images.items():
            by_index[index].images[camera] = self._check(index, camera, raw, limits)
        return parsed

    def _decode_b64(self, index: int, camera: str, text: str) -> bytes:
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ValidationError({"steps": [f"step {index}: images.{camera}: not valid base64"]}) from None

    @staticmethod
    def _check(index: int, camera: str, raw: bytes, limits: dict) -> CheckedImage:
        try:
            return check_image(raw, **limits)
        except ImageError as exc:
            raise ValidationError({"steps": [f"step {index}: images.{camera}: {exc}"]}) from None


def _multipart_steps(text: str):
    """A multipart chunk's `steps` field: its header, held to the binary header's limits (size, then depth)
    before it is parsed."""
    limit = settings.CHUNK_HEADER_MAX_BYTES
    if len(text) > limit:  # characters: at least as many bytes
        raise RequestTooLarge(
            f"steps field of {len(text)} characters; the limit is {limit} bytes (CHUNK_HEADER_MAX_BYTES)"
        )
    try:
        return loads_bounded(text, max_depth=settings.JSON_MAX_DEPTH, what="steps field")
    except JSONTooDeep as exc:
        raise ValidationError({"steps": [str(exc)]}) from None
    except ValueError as exc:
        raise ValidationError({"steps": [f"not valid JSON: {exc}"]}) from None


def _json_header_check(raw_steps: list) -> None:
    """A JSON chunk's steps without their images (what the binary format calls the header) within
    CHUNK_HEADER_MAX_BYTES, like the other two formats: 413 before any step is validated or stored. (The body
    as a whole was bounded by INGEST_JSON_CHUNK_MAX_BYTES before it was read: webapp.security.body_limit.)"""
    limit = settings.CHUNK_HEADER_MAX_BYTES
    size = 0
    for raw in raw_steps[: settings.INGEST_MAX_STEPS_PER_CHUNK + 1]:
        fields = {key: value for key, value in raw.items() if key != "images"} if isinstance(raw, dict) else raw
        size += size_of(fields) + 1
        if size > limit:
            raise RequestTooLarge(
                f"the chunk's steps without their images are over {limit} bytes as JSON (CHUNK_HEADER_MAX_BYTES); "
                "send fewer steps per chunk or a smaller info"
            )


def _first(messages) -> str:
    if isinstance(messages, dict):
        key, value = next(iter(messages.items()))
        return f"{key}: {_first(value)}"
    if isinstance(messages, list) and messages:
        return _first(messages[0])
    return str(messages)


class EpisodeFinishView(APIView):
    parser_classes = [BoundedJSONParser]

    @extend_schema(request=FinishIn, responses=EpisodeOut, summary="Finish an episode (idempotent)")
    def post(self, request, uuid):
        episode = _episode(request, uuid)
        data = FinishIn(data=request.data)
        data.is_valid(raise_exception=True)
        episode = services.episode_finish(episode=episode, **data.validated_data)
        return Response(EpisodeOut(episode).data)
