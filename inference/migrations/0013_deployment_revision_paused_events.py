import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0012_deployment_ood_action"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="paused",
            field=models.BooleanField(default=False, help_text="A paused deployment answers clients 503 saying so."),
        ),
        migrations.AddField(
            model_name="deployment",
            name="revision",
            field=models.PositiveIntegerField(
                default=1, help_text="The readable version (v1, v2, ...): one more each time another model is served."
            ),
        ),
        migrations.CreateModel(
            name="DeploymentEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("deployment_name", models.CharField(db_index=True, max_length=100)),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("created", "Created"),
                            ("switched", "Switched model"),
                            ("settings", "Changed settings"),
                            ("paused", "Paused"),
                            ("resumed", "Resumed"),
                            ("reloaded", "Reloaded"),
                            ("deleted", "Deleted"),
                        ],
                        max_length=10,
                    ),
                ),
                (
                    "actor",
                    models.CharField(help_text="Who: a user name, an agent token or a retrain policy.", max_length=150),
                ),
                ("revision", models.PositiveIntegerField(help_text="The deployment's revision after the change.")),
                (
                    "detail",
                    models.JSONField(
                        blank=True, default=dict, help_text="Models switched, settings changed (old, new)."
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "deployment",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="events",
                        to="inference.deployment",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["-created_at", "-pk"]},
        ),
    ]
