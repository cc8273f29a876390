"""The job progress payload's fields for a kind's API serializer (the same keys as `payload.JobProgress`)."""

from __future__ import annotations

from rest_framework import serializers

from .payload import JobProgress


class JobProgressOut(serializers.Serializer):
    """The payload's fields for an API: a kind's serializer inherits them and lists `JOB_PROGRESS_FIELDS`."""

    status = serializers.CharField(read_only=True)
    progress = serializers.FloatField(read_only=True, help_text="0..1; 1 once succeeded.")
    percent = serializers.IntegerField(read_only=True, help_text="The progress in percent, rounded down.")
    finished = serializers.BooleanField(read_only=True, help_text="Ended (poll until true).")
    attempt = serializers.IntegerField(
        read_only=True, help_text="Runs started; a run lost with its worker is requeued."
    )
    error = serializers.CharField(read_only=True, help_text="Why the job failed, in one line.")
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    heartbeat_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)


JOB_PROGRESS_FIELDS = list(JobProgress.__annotations__)  # a kind's `Meta.fields` lists them
