# The job kit's meaning for import and proposal jobs (a migration of its own: PostgreSQL alters no table with
# updates pending in the same transaction): a queued job's `heartbeat_at` (the old `updated_at`) becomes its
# `enqueued_at`, status `done` becomes the shared `succeeded`, and the progress is stored.

from django.db import migrations
from django.db.models import F, FloatField
from django.db.models.functions import Cast, Coalesce

MODELS = ("ImportJob", "ProposalJob")


def forward(apps, schema_editor):
    for name in MODELS:
        rows = apps.get_model("labeling", name).objects
        rows.filter(status="done").update(status="succeeded")
        rows.filter(status="queued").update(enqueued_at=F("heartbeat_at"), heartbeat_at=None)
        rows.filter(enqueued_at__isnull=True).update(enqueued_at=F("created_at"))
        rows.filter(status="succeeded").update(progress=1.0)
        rows.exclude(status="succeeded").filter(total__gt=0).update(
            progress=Cast(F("done"), FloatField()) / Cast(F("total"), FloatField())
        )


def backward(apps, schema_editor):
    for name in MODELS:
        rows = apps.get_model("labeling", name).objects
        rows.filter(status="succeeded").update(status="done")
        rows.update(heartbeat_at=Coalesce(F("heartbeat_at"), F("enqueued_at"), F("created_at")))


class Migration(migrations.Migration):

    dependencies = [
        ('labeling', '0010_job_kit'),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
