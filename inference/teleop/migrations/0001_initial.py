"""TeleopSession moves from the inference app to teleop: state only, its tables keep their names and rows.

The table `inference_teleopsession` (and its episodes table) was made by inference's migration 0003; this
migration only tells Django's state that the model now belongs to teleop, then moves the content type
so admin permissions granted on it keep working. inference's 0007 removes the model from inference's state.
"""

import django.db.models.deletion
from django.db import migrations, models


def content_type_to_teleop(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType")
    if not content_types.objects.filter(app_label="teleop", model="teleopsession").exists():
        content_types.objects.filter(app_label="inference", model="teleopsession").update(app_label="teleop")


def content_type_to_inference(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType")
    if not content_types.objects.filter(app_label="inference", model="teleopsession").exists():
        content_types.objects.filter(app_label="teleop", model="teleopsession").update(app_label="inference")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("inference", "0006_merge_rlinf_semantics_and_monitor"),
        ("labeling", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="TeleopSession",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("deployment_name", models.CharField(blank=True, help_text="Deployment that scores the frames.", max_length=100)),
                        ("robot", models.CharField(blank=True, max_length=100)),
                        ("env_id", models.CharField(blank=True, max_length=100)),
                        ("policy", models.CharField(blank=True, max_length=50)),
                        ("hz", models.FloatField(default=10.0, help_text="Control rate the agent announced.")),
                        ("cameras", models.JSONField(blank=True, default=list)),
                        ("is_live", models.BooleanField(default=True)),
                        ("started_at", models.DateTimeField(auto_now_add=True)),
                        ("last_seen_at", models.DateTimeField(blank=True, null=True)),
                        ("ended_at", models.DateTimeField(blank=True, null=True)),
                        ("step_count", models.PositiveIntegerField(default=0)),
                        ("inferred_count", models.PositiveIntegerField(default=0)),
                        ("dropped_frames", models.PositiveIntegerField(default=0, help_text="Frames replaced before inference ran.")),
                        ("label_count", models.PositiveIntegerField(default=0)),
                        ("stats", models.JSONField(blank=True, default=dict, help_text="Latency, rate and last probability.")),
                        ("agent", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="teleop_sessions", to="labeling.agent")),
                        ("episodes", models.ManyToManyField(blank=True, related_name="teleop_sessions", to="labeling.episode")),
                        ("project", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="teleop_sessions", to="labeling.project")),
                    ],
                    options={
                        "db_table": "inference_teleopsession",
                        "ordering": ["-started_at"],
                        "indexes": [models.Index(fields=["is_live", "-started_at"], name="inference_t_is_live_bbf625_idx")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_to_teleop, content_type_to_inference),
    ]
