"""Input and output shapes of the ingest API."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from common.json_limits import size_of

from ..models import Episode, Frame

MAX_STEP_INDEX = 2**31 - 1  # the database column's range: larger indices are refused, not a 500
MAX_ACTION_SIZE = 1024


def json_field_size_check(value) -> None:
    """A free-form object stored as JSON (a step's info, an episode's metadata) within JSON_FIELD_MAX_BYTES."""
    limit = settings.JSON_FIELD_MAX_BYTES
    size = size_of(value)
    if size > limit:
        raise serializers.ValidationError(f"{size} bytes as JSON; the limit is {limit} bytes (JSON_FIELD_MAX_BYTES)")


# component_name: the OpenAPI name the body had before the <Thing>In/<Thing>Out naming rule, kept for clients.
@extend_schema_serializer(component_name="EpisodeCreate")
class EpisodeCreateIn(serializers.Serializer):
    project = serializers.CharField(max_length=200, help_text="Project id or name.")
    uuid = serializers.UUIDField(help_text="Client-supplied id; retrying with the same id returns the same episode.")
    # a field named like Field.source: the serializer metaclass moves it into _declared_fields
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=Episode.Source.choices, default=Episode.Source.SIM
    )
    env_id = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    metadata = serializers.DictField(required=False, default=dict, validators=[json_field_size_check])


@extend_schema_serializer(component_name="Episode")
class EpisodeOut(serializers.ModelSerializer):
    project = serializers.CharField(source="project.name")
    agent = serializers.CharField(
        source="agent.name", default=None, allow_null=True, help_text="Null when a person made it."
    )
    num_frames = serializers.SerializerMethodField(help_text="Frame files stored, all cameras.")

    class Meta:
        model = Episode
        fields = [
            "uuid",
            "project",
            "source",
            "agent",
            "env_id",
            "success",
            "status",
            "num_steps",
            "num_frames",
            "metadata",
            "created_at",
            "finished_at",
        ]

    def get_num_frames(self, episode: Episode) -> int:
        known = self.context.get("num_frames")  # the caller knows it (a new episode has none)
        return Frame.objects.filter(step__episode=episode).count() if known is None else known


@extend_schema_serializer(component_name="Step")
class StepIn(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=MAX_STEP_INDEX)
    action = serializers.ListField(
        child=serializers.FloatField(), required=False, default=list, max_length=MAX_ACTION_SIZE
    )
    reward = serializers.FloatField(required=False, default=0.0)
    terminated = serializers.BooleanField(required=False, default=False)
    truncated = serializers.BooleanField(required=False, default=False)
    success = serializers.BooleanField(required=False, default=False, help_text="The env's per-step success flag.")
    score = serializers.FloatField(required=False, allow_null=True, default=None, help_text="Trend score (gae).")
    info = serializers.DictField(required=False, default=dict, validators=[json_field_size_check])
    images = serializers.DictField(
        child=serializers.CharField(max_length=64 * 1024 * 1024),
        required=False,
        default=dict,
        help_text="JSON bodies only: camera name -> base64 PNG/JPEG/.npy bytes. Multipart bodies send files "
        "named frame.<index>.<camera> instead.",
    )


@extend_schema_serializer(component_name="StepChunk")
class StepChunkIn(serializers.Serializer):
    steps = StepIn(many=True, help_text="Multipart: a JSON string.")


@extend_schema_serializer(component_name="AppendResult")
class AppendResultOut(serializers.Serializer):
    created = serializers.IntegerField(help_text="Steps stored by this call.")
    skipped = serializers.IntegerField(help_text="Steps already stored (a retry); left unchanged.")
    num_steps = serializers.IntegerField()


@extend_schema_serializer(component_name="StoredSteps")
class StoredStepsOut(serializers.Serializer):
    num_steps = serializers.IntegerField(help_text="Steps stored.")
    ranges = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="The stored step indices as sorted inclusive [first, last] ranges.",
    )


@extend_schema_serializer(component_name="Finish")
class FinishIn(serializers.Serializer):
    success = serializers.BooleanField(required=False, allow_null=True, default=None)
    metadata = serializers.DictField(required=False, default=dict, validators=[json_field_size_check])
