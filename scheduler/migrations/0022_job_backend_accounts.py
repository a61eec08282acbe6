"""The account each attempt's run was submitted as (``Job.backend_accounts``, Slurm's
team_accounts), so remapping a team changes its new runs alone, and an index for the stale-run
sweep's recently ended jobs. Existing rows get ``{}``: their runs are judged by their team's
account, as before."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0021_allocation_ended_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='backend_accounts',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(fields=['cluster', 'finished_at'], name='job_cluster_finished'),
        ),
    ]
