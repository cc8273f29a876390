"""RLinf's trend prompt says "{window_size}-frame" (as RLinf's dataset preprocessing writes it), not "5-frame"
whatever the window: the new default, and projects that kept the old default text get the new one (at the
default window of 5 both render the same text)."""

from django.db import migrations, models

OLD = (
    "You are currently performing the task: {task}. You are given two synchronized 5-frame videos from different "
    "camera views (main view and third-person view) of the same robot action window. Judge whether the action "
    "trend is positive, negative, or unclear. Answer with exactly one word: positive, negative, or unclear."
)
NEW = OLD.replace("5-frame", "{window_size}-frame")


def forwards(apps, schema_editor):
    apps.get_model("labeling", "Project").objects.filter(prompt_template=OLD).update(prompt_template=NEW)


def backwards(apps, schema_editor):
    apps.get_model("labeling", "Project").objects.filter(prompt_template=NEW).update(prompt_template=OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0008_job_attempts"),
    ]

    operations = [
        migrations.AlterField(
            model_name="project",
            name="prompt_template",
            field=models.TextField(default=NEW),
        ),
        migrations.RunPython(forwards, backwards),
    ]
