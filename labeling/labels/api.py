"""Label API: what the labeling pages read and write. Session (with CSRF) or agent-token auth.

Every write is saved at once and returns what changed (old and new values), so a client can undo it
by sending the old values back.
"""

from __future__ import annotations

from django.core.files.storage import default_storage
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiTypes,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from common.object_reads import frames_read_kept
from common.parsers import BoundedJSONParser
from labeling import permissions as labeling_perms
from labeling.labels import ownership
from projects import access
from projects.models import Project

from ..ingest.serializers import MAX_STEP_INDEX
from ..models import Episode, Frame, FrameLabel, WindowLabel
from . import selectors as label_selectors
from .services import Actor, LabelConflict, LabelError, frame_labels_set, window_labels_set

MAX_ITEMS = 100_000
MAX_FRAMES_PER_BUNDLE = 200


def _episode(request, uuid, perm=labeling_perms.VIEW) -> Episode:
    episode = get_object_or_404(Episode.objects.select_related("project"), uuid=uuid)
    access.require(request.user, perm, episode.project)
    return episode


def _project(request, pk, perm=labeling_perms.VIEW) -> Project:
    project = get_object_or_404(Project, pk=pk)
    access.require(request.user, perm, project)
    return project


def _bad(exc: Exception) -> ValidationError:
    return ValidationError({"detail": str(exc)})


# ---- serializers -------------------------------------------------------------------------------


BASE_HELP = (
    "The value the edit was based on (null: no label). If someone changed it meanwhile, nothing is saved "
    "and the answer is 409 listing the conflicts; leave it out to overwrite whatever is there."
)


# component_name: the OpenAPI name the body had before the <Thing>In/<Thing>Out naming rule, kept for clients.
@extend_schema_serializer(component_name="FrameItem")
class FrameItemIn(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX)
    value = serializers.ChoiceField(choices=FrameLabel.Value.choices, allow_null=True)
    base = serializers.ChoiceField(
        choices=FrameLabel.Value.choices, allow_null=True, required=False, help_text=BASE_HELP
    )


class FrameLabelsIn(serializers.Serializer):
    """Either a range (start..end inclusive, one value for all) or a list of items."""

    start = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX, required=False)
    end = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX, required=False)
    value = serializers.ChoiceField(
        choices=FrameLabel.Value.choices, allow_null=True, required=False, help_text="null clears the label"
    )
    base = serializers.ChoiceField(
        choices=FrameLabel.Value.choices, allow_null=True, required=False, help_text=BASE_HELP + " (every step)"
    )
    items = FrameItemIn(many=True, required=False, max_length=MAX_ITEMS)  # type: ignore[call-arg]  # many=True passes max_length on to ListSerializer

    def validate(self, attrs):
        if "items" in attrs:
            if {"start", "end", "value", "base"} & set(attrs):
                raise serializers.ValidationError("send either items or start/end/value, not both")
            return attrs
        if "start" not in attrs or "value" not in attrs:
            raise serializers.ValidationError("send start (and end) with value, or items")
        attrs.setdefault("end", attrs["start"])
        if attrs["end"] < attrs["start"]:
            raise serializers.ValidationError("end must not be before start")
        if attrs["end"] - attrs["start"] >= MAX_ITEMS:
            raise serializers.ValidationError(f"a range may hold at most {MAX_ITEMS} steps")
        return attrs


@extend_schema_serializer(component_name="FrameChange")
class FrameChangeOut(serializers.Serializer):
    index = serializers.IntegerField()
    old = serializers.CharField(allow_null=True)
    new = serializers.CharField(allow_null=True)


@extend_schema_serializer(component_name="FrameChanges")
class FrameChangesOut(serializers.Serializer):
    changed = FrameChangeOut(many=True)


@extend_schema_serializer(component_name="WindowItem")
class WindowItemIn(serializers.Serializer):
    start = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX)
    end = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX)
    value = serializers.ChoiceField(
        choices=WindowLabel.Value.choices, allow_null=True, help_text="null deletes the human window label"
    )
    base = serializers.ChoiceField(
        choices=WindowLabel.Value.choices, allow_null=True, required=False, help_text=BASE_HELP
    )

    def validate(self, attrs):
        if attrs["end"] < attrs["start"]:
            raise serializers.ValidationError("end must not be before start")
        return attrs


class WindowLabelsIn(serializers.Serializer):
    start = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX, required=False)
    end = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX, required=False)
    value = serializers.ChoiceField(choices=WindowLabel.Value.choices, allow_null=True, required=False)
    base = serializers.ChoiceField(
        choices=WindowLabel.Value.choices, allow_null=True, required=False, help_text=BASE_HELP
    )
    items = WindowItemIn(many=True, required=False, max_length=MAX_ITEMS)  # type: ignore[call-arg]  # as above

    def validate(self, attrs):
        if "items" in attrs:
            if {"start", "end", "value", "base"} & set(attrs):
                raise serializers.ValidationError("send either items or start/end/value, not both")
            return attrs
        if not {"start", "end", "value"} <= set(attrs):
            raise serializers.ValidationError("send start, end and value, or items")
        if attrs["end"] < attrs["start"]:
            raise serializers.ValidationError("end must not be before start")
        return attrs


@extend_schema_serializer(component_name="WindowChange")
class WindowChangeOut(serializers.Serializer):
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    old = serializers.CharField(allow_null=True)
    new = serializers.CharField(allow_null=True)


@extend_schema_serializer(component_name="WindowChanges")
class WindowChangesOut(serializers.Serializer):
    changed = WindowChangeOut(many=True)


@extend_schema_serializer(component_name="Conflict")
class ConflictOut(serializers.Serializer):
    start = serializers.IntegerField(help_text="Step index (frames) or window start.")
    end = serializers.IntegerField()
    base = serializers.CharField(allow_null=True, help_text="The value the edit was based on.")
    current = serializers.CharField(allow_null=True, help_text="The value stored now.")
    by = serializers.CharField(help_text="Who stored it (user name, or agent <name>).")


@extend_schema_serializer(component_name="ConflictResponse")
class ConflictsOut(serializers.Serializer):
    detail = serializers.CharField()
    conflicts = ConflictOut(many=True)


def _conflict_response(exc: LabelConflict) -> Response:
    conflicts = [
        {"start": c.start, "end": c.end, "base": c.base, "current": c.current, "by": c.by} for c in exc.conflicts
    ]
    return Response({"detail": str(exc), "conflicts": conflicts}, status=status.HTTP_409_CONFLICT)


class WindowSpanIn(serializers.Serializer):
    start = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX)
    end = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX)


@extend_schema_serializer(component_name="Progress")
class ProgressOut(serializers.Serializer):
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label (the metaclass moves it)
    kind = serializers.CharField()
    done = serializers.IntegerField()
    target = serializers.IntegerField()
    percent = serializers.IntegerField()
    note = serializers.CharField(help_text="Why the data may never meet the target; empty otherwise.")


@extend_schema_serializer(component_name="ProjectProgress")
class ProjectProgressOut(serializers.Serializer):
    progress = ProgressOut(many=True)
    open_proposals = serializers.DictField(child=serializers.IntegerField())


HISTORY_LIMIT, HISTORY_MAX_LIMIT = 200, 1000


@extend_schema_serializer(component_name="LabelChange")
class LabelChangeOut(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    kind = serializers.CharField()
    action = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.source (the metaclass moves it)
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    old_value = serializers.CharField()
    new_value = serializers.CharField()
    who = serializers.SerializerMethodField()

    def get_who(self, change) -> str:
        if change.author_id:
            return change.author.get_username()
        if change.agent_id:
            return f"agent:{change.agent.name}"
        return "system"


EPISODE_DATA = inline_serializer(
    "EpisodeLabelingData",
    {
        "episode": serializers.DictField(),
        "project": serializers.DictField(),
        "steps": serializers.DictField(help_text="index, reward, score, success, action: one entry per step."),
        "frames": serializers.DictField(help_text="Per camera: frame URL per step (null when missing)."),
        "frame_labels": serializers.DictField(help_text="human, proposal, proposal_status: one entry per step."),
        "windows": serializers.ListField(child=serializers.DictField()),
    },
)


# ---- views -------------------------------------------------------------------------------------


class EpisodeLabelingView(APIView):
    @extend_schema(responses=EPISODE_DATA, summary="Everything the labeling page needs about an episode")
    def get(self, request, uuid):
        return Response(label_selectors.episode_labeling_data(episode=_episode(request, uuid)))


class FrameBundleQueryIn(serializers.Serializer):
    camera = serializers.CharField(max_length=50)
    start = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX, help_text="First step index.")
    end = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX, help_text="Last step index (inclusive).")

    def validate(self, attrs):
        if attrs["end"] < attrs["start"]:
            raise serializers.ValidationError("end must not be before start")
        if attrs["end"] - attrs["start"] >= MAX_FRAMES_PER_BUNDLE:
            raise serializers.ValidationError(f"a bundle holds at most {MAX_FRAMES_PER_BUNDLE} frames")
        return attrs


class FrameBundleView(APIView):
    """Many frames of one camera in one response, so a page can prefetch an episode in a few requests."""

    @extend_schema(
        parameters=[FrameBundleQueryIn],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
        summary="The encoded frames of one camera for steps start..end, concatenated",
        description=(
            "The body is the frames' stored bytes (PNG or JPEG) back to back. Header `X-Frame-Steps` lists the "
            "step indices and `X-Frame-Lengths` the byte length of each frame, in the same order."
        ),
    )
    def get(self, request, uuid):
        episode = _episode(request, uuid)
        query = FrameBundleQueryIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        values = query.validated_data
        if values["camera"] not in episode.project.camera_views:
            raise ValidationError({"camera": [f"project cameras are {episode.project.camera_views}"]})
        frames = (
            Frame.objects.filter(
                step__episode=episode,
                camera=values["camera"],
                step__index__gte=values["start"],
                step__index__lte=values["end"],
            )
            .order_by("step__index")
            .values_list("step__index", "image")
        )
        rows = list(frames)
        parts = frames_read_kept(default_storage, [name for _, name in rows])  # S3: kept in the web's cache
        steps = [str(index) for index, _ in rows]
        lengths = [str(len(data)) for data in parts]
        response = HttpResponse(b"".join(parts), content_type="application/octet-stream")
        response["X-Frame-Steps"] = ",".join(steps)
        response["X-Frame-Lengths"] = ",".join(lengths)
        response["Cache-Control"] = "private, max-age=3600"
        return response


class FrameLabelsView(APIView):
    parser_classes = [BoundedJSONParser]

    @extend_schema(
        request=FrameLabelsIn,
        responses={200: FrameChangesOut, 409: ConflictsOut},
        summary="Set or clear human frame labels (a range or a list)",
    )
    def put(self, request, uuid):
        episode = _episode(request, uuid, labeling_perms.LABEL)
        data = FrameLabelsIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        if "items" in values:
            items = [(item["index"], item["value"]) for item in values["items"]]
            bases = {item["index"]: item["base"] for item in values["items"] if "base" in item}
        else:
            items = [(i, values["value"]) for i in range(values["start"], values["end"] + 1)]
            bases = {i: values["base"] for i, _ in items} if "base" in values else {}
        ownership.require_may_change_labels(request.user, episode, steps=[index for index, _ in items])
        try:
            edits = frame_labels_set(episode=episode, items=items, actor=Actor.of(request.user), bases=bases)
        except LabelConflict as exc:
            return _conflict_response(exc)
        except LabelError as exc:
            raise _bad(exc) from None
        return Response({"changed": [{"index": e.index, "old": e.old, "new": e.new} for e in edits]})


class WindowLabelsView(APIView):
    parser_classes = [BoundedJSONParser]

    @extend_schema(
        request=WindowLabelsIn,
        responses={200: WindowChangesOut, 409: ConflictsOut},
        summary="Set human window labels (value null deletes); windows may overlap",
    )
    def post(self, request, uuid):
        episode = _episode(request, uuid, labeling_perms.LABEL)
        data = WindowLabelsIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        rows = values.get("items", [values])
        items = [(i["start"], i["end"], i["value"]) for i in rows]
        bases = {(i["start"], i["end"]): i["base"] for i in rows if "base" in i}
        return self._apply(request, episode, items, bases)

    @extend_schema(
        parameters=[
            OpenApiParameter("start", OpenApiTypes.INT, required=True),
            OpenApiParameter("end", OpenApiTypes.INT, required=True),
        ],
        request=None,
        responses=WindowChangesOut,
        summary="Delete the human window label of one span",
    )
    def delete(self, request, uuid):
        episode = _episode(request, uuid, labeling_perms.LABEL)
        span = WindowSpanIn(data=request.query_params)
        span.is_valid(raise_exception=True)
        return self._apply(request, episode, [(span.validated_data["start"], span.validated_data["end"], None)])

    def _apply(self, request, episode, items, bases=None):
        ownership.require_may_change_labels(request.user, episode, spans=[(start, end) for start, end, _ in items])
        try:
            edits = window_labels_set(episode=episode, items=items, actor=Actor.of(request.user), bases=bases or {})
        except LabelConflict as exc:
            return _conflict_response(exc)
        except LabelError as exc:
            raise _bad(exc) from None
        return Response({"changed": [{"start": e.start, "end": e.end, "old": e.old, "new": e.new} for e in edits]})


class HistoryPageIn(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=HISTORY_MAX_LIMIT, default=HISTORY_LIMIT)
    before = serializers.IntegerField(min_value=1, required=False, help_text="A change's id: the older ones follow.")


class EpisodeHistoryView(APIView):
    @extend_schema(
        parameters=[HistoryPageIn],
        responses=LabelChangeOut(many=True),
        summary="Label change history, newest first, a page at a time (the next: ?before=<last id>)",
    )
    def get(self, request, uuid):
        page = HistoryPageIn(data=request.query_params)
        page.is_valid(raise_exception=True)
        changes = label_selectors.episode_history(episode=_episode(request, uuid), **page.validated_data)
        return Response(LabelChangeOut(changes, many=True).data)


class ProjectProgressView(APIView):
    @extend_schema(responses=ProjectProgressOut, summary="Human labels against the project's targets")
    def get(self, request, pk):
        project = _project(request, pk)
        progress = [
            {"label": p.label, "kind": p.kind, "done": p.done, "target": p.target, "percent": p.percent, "note": p.note}
            for p in label_selectors.project_progress(project=project)
        ]
        return Response(
            {"progress": progress, "open_proposals": label_selectors.project_open_proposals(project=project)}
        )
