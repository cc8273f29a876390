"""The job kit records the task id of every kind's last message (`Job.celery_task_id`; import and proposal jobs
had none)."""


from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('labeling', '0012_alter_episode_agent_alter_labelchange_agent_and_more'),
    ]

    operations = [
        migrations.AddField(
            model_name='importjob',
            name='celery_task_id',
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name='proposaljob',
            name='celery_task_id',
            field=models.CharField(blank=True, max_length=100),
        ),
    ]
