"""Retiring nodes and clusters (scheduler.retirement): a node's retiring/retired times and reason,
a ``retired`` node state and node event kinds, a cluster's retiring/retired times. New columns
are null or blank: no existing row is retired."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0001_initial'),
        ('scheduler', '0019_one_line_names'),
    ]

    operations = [
        migrations.AddField(
            model_name='cluster',
            name='retired_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='cluster',
            name='retiring_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='node',
            name='retire_reason',
            field=models.CharField(blank=True, max_length=300),
        ),
        migrations.AddField(
            model_name='node',
            name='retired_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='node',
            name='retiring_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='node',
            name='state',
            field=models.CharField(choices=[('ready', 'Ready'), ('draining', 'Draining'), ('quarantined', 'Quarantined'), ('down', 'Down'), ('retired', 'Retired')], default='ready', max_length=16),
        ),
        migrations.AlterField(
            model_name='nodeevent',
            name='kind',
            field=models.CharField(choices=[('failed', 'Failed'), ('recovered', 'Recovered'), ('quarantined', 'Quarantined'), ('probation', 'Probation'), ('released', 'Released'), ('drained', 'Drained'), ('retired', 'Retired'), ('reinstated', 'Reinstated')], max_length=16),
        ),
        migrations.AddConstraint(
            model_name='cluster',
            constraint=models.CheckConstraint(condition=models.Q(('retired_at__isnull', True), ('retiring_since__isnull', False), _connector='OR'), name='cluster_retired_after_retiring'),
        ),
        migrations.AddConstraint(
            model_name='node',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('retired_at__isnull', False), ('retiring_since__isnull', False), ('state', 'retired')), models.Q(models.Q(('state', 'retired'), _negated=True), ('retired_at__isnull', True)), _connector='OR'), name='node_retired_consistent'),
        ),
    ]
