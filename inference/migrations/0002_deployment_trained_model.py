import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0001_initial"),
        ("training", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="trained_model",
            field=models.ForeignKey(
                help_text="The served checkpoint.",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="deployments",
                to="training.trainedmodel",
            ),
            preserve_default=False,
        ),
    ]
