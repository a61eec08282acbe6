"""Egress lines on statements: a closed statement freezes its egress (per sub-team and cluster
pair) next to its GPU lines, and its total is both. A new table only: statements closed before
keep their lines and their GPU-only total."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0005_usage_cluster_backfill'),
        ('tenants', '0006_gpu_model_in_catalogue'),
    ]

    operations = [
        migrations.CreateModel(
            name='StatementEgressLine',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('from_cluster', models.CharField(max_length=64)),
                ('to_cluster', models.CharField(max_length=64)),
                ('charges', models.PositiveIntegerField()),
                ('gb', models.DecimalField(decimal_places=3, max_digits=16)),
                ('cost', models.DecimalField(decimal_places=2, max_digits=14)),
                ('statement', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='egress_lines', to='billing.statement')),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenants.team')),
            ],
            options={
                'ordering': ['team__slug', 'from_cluster', 'to_cluster'],
                'constraints': [models.UniqueConstraint(fields=('statement', 'team', 'from_cluster', 'to_cluster'), name='stmtegress_unique_key'), models.CheckConstraint(condition=models.Q(('cost__gte', 0)), name='stmtegress_cost_gte_0')],
            },
        ),
    ]
