# Import and proposal jobs inherit the job kit's row (common.jobs.models.Job): their heartbeat
# `updated_at` becomes `heartbeat_at`; 0011 moves the data to the kit's meaning.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('labeling', '0009_prompt_window_size'),
    ]

    operations = [
        migrations.RenameField(model_name='importjob', old_name='updated_at', new_name='heartbeat_at'),
        migrations.RenameField(model_name='proposaljob', old_name='updated_at', new_name='heartbeat_at'),
        migrations.AlterField(
            model_name='importjob',
            name='heartbeat_at',
            field=models.DateTimeField(blank=True, help_text='Last sign of life of the running run (empty while none runs).', null=True),
        ),
        migrations.AlterField(
            model_name='proposaljob',
            name='heartbeat_at',
            field=models.DateTimeField(blank=True, help_text='Last sign of life of the running run (empty while none runs).', null=True),
        ),
        migrations.AddField(
            model_name='importjob',
            name='enqueued_at',
            field=models.DateTimeField(blank=True, help_text="When the job's message was last sent.", null=True),
        ),
        migrations.AddField(
            model_name='importjob',
            name='progress',
            field=models.FloatField(default=0.0, help_text='0..1'),
        ),
        migrations.AddField(
            model_name='importjob',
            name='started_at',
            field=models.DateTimeField(blank=True, help_text='When the last run started.', null=True),
        ),
        migrations.AddField(
            model_name='proposaljob',
            name='enqueued_at',
            field=models.DateTimeField(blank=True, help_text="When the job's message was last sent.", null=True),
        ),
        migrations.AddField(
            model_name='proposaljob',
            name='progress',
            field=models.FloatField(default=0.0, help_text='0..1'),
        ),
        migrations.AddField(
            model_name='proposaljob',
            name='started_at',
            field=models.DateTimeField(blank=True, help_text='When the last run started.', null=True),
        ),
        migrations.AlterField(
            model_name='importjob',
            name='error',
            field=models.TextField(blank=True, help_text='Why the job failed, in one line (shown to users).'),
        ),
        migrations.AlterField(
            model_name='importjob',
            name='status',
            field=models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='queued', max_length=10),
        ),
        migrations.AlterField(
            model_name='proposaljob',
            name='error',
            field=models.TextField(blank=True, help_text='Why the job failed, in one line (shown to users).'),
        ),
        migrations.AlterField(
            model_name='proposaljob',
            name='status',
            field=models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='queued', max_length=10),
        ),
    ]
