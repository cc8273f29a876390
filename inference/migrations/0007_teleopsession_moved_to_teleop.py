"""TeleopSession now belongs to the teleop app (its 0001): removed from inference's state only, so its
table `inference_teleopsession` and the rows in it stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0006_merge_rlinf_semantics_and_monitor"),
        ("teleop", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="TeleopSession")],
            database_operations=[],
        ),
    ]
