"""Billing across clusters (issue 25): a price rate may belong to one cluster (null: the
platform-wide rate), with one unique constraint per scope (NULLs are distinct in a unique
index); usage and its daily rollup record their cluster (filled for existing rows by 0005);
frozen statement lines carry the cluster's name; egress charges, one per job attempt."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0003_gpu_model_in_catalogue'),
        ('catalogue', '0001_initial'),
        ('scheduler', '0014_routing_facts'),
        ('tenants', '0006_gpu_model_in_catalogue'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='EgressCharge',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('attempt', models.PositiveIntegerField()),
                ('dataset', models.CharField(max_length=200)),
                ('size_gb', models.FloatField()),
                ('price_per_gb', models.DecimalField(decimal_places=4, max_digits=10)),
                ('cost', models.DecimalField(decimal_places=6, max_digits=18)),
                ('time', models.DateTimeField()),
            ],
            options={
                'ordering': ['time', 'id'],
            },
        ),
        migrations.AlterModelOptions(
            name='pricerate',
            options={'ordering': ['cluster__name', 'gpu_model__name', 'capacity', 'effective_from']},
        ),
        migrations.AlterModelOptions(
            name='statementline',
            options={'ordering': ['team__slug', 'gpu_model__name', 'capacity', 'cluster']},
        ),
        migrations.AlterModelOptions(
            name='usagedaily',
            options={'ordering': ['day', 'team_id', 'gpu_model_id', 'capacity', 'cluster_id']},
        ),
        migrations.RemoveConstraint(
            model_name='pricerate',
            name='price_unique_model_cap_from',
        ),
        migrations.RemoveConstraint(
            model_name='statementline',
            name='stmtline_unique_key',
        ),
        migrations.RemoveConstraint(
            model_name='usagedaily',
            name='usagedaily_unique_key',
        ),
        migrations.AddField(
            model_name='pricerate',
            name='cluster',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='price_rates', to='scheduler.cluster'),
        ),
        migrations.AddField(
            model_name='statementline',
            name='cluster',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
        migrations.AddField(
            model_name='usagedaily',
            name='cluster',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='scheduler.cluster'),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='cluster',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='scheduler.cluster'),
        ),
        migrations.AddConstraint(
            model_name='pricerate',
            constraint=models.UniqueConstraint(condition=models.Q(('cluster__isnull', True)), fields=('gpu_model', 'capacity', 'effective_from'), name='price_unique_model_cap_from'),
        ),
        migrations.AddConstraint(
            model_name='pricerate',
            constraint=models.UniqueConstraint(condition=models.Q(('cluster__isnull', False)), fields=('cluster', 'gpu_model', 'capacity', 'effective_from'), name='price_unique_cluster_model_cap_from'),
        ),
        migrations.AddConstraint(
            model_name='statementline',
            constraint=models.UniqueConstraint(fields=('statement', 'team', 'gpu_model', 'capacity', 'cluster'), name='stmtline_unique_key'),
        ),
        migrations.AddConstraint(
            model_name='usagedaily',
            constraint=models.UniqueConstraint(condition=models.Q(('cluster__isnull', False)), fields=('team', 'day', 'gpu_model', 'capacity', 'cluster'), name='usagedaily_unique_key'),
        ),
        migrations.AddConstraint(
            model_name='usagedaily',
            constraint=models.UniqueConstraint(condition=models.Q(('cluster__isnull', True)), fields=('team', 'day', 'gpu_model', 'capacity'), name='usagedaily_unique_key_no_cluster'),
        ),
        migrations.AddField(
            model_name='egresscharge',
            name='from_cluster',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='scheduler.cluster'),
        ),
        migrations.AddField(
            model_name='egresscharge',
            name='job',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='egress_charges', to='scheduler.job'),
        ),
        migrations.AddField(
            model_name='egresscharge',
            name='team',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='egress_charges', to='tenants.team'),
        ),
        migrations.AddField(
            model_name='egresscharge',
            name='to_cluster',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='scheduler.cluster'),
        ),
        migrations.AddIndex(
            model_name='egresscharge',
            index=models.Index(fields=['team', 'time'], name='egress_team_time'),
        ),
        migrations.AddConstraint(
            model_name='egresscharge',
            constraint=models.UniqueConstraint(fields=('job', 'attempt'), name='egress_unique_job_attempt'),
        ),
        migrations.AddConstraint(
            model_name='egresscharge',
            constraint=models.CheckConstraint(condition=models.Q(('size_gb__gt', 0)), name='egress_size_positive'),
        ),
        migrations.AddConstraint(
            model_name='egresscharge',
            constraint=models.CheckConstraint(condition=models.Q(('cost__gte', 0)), name='egress_cost_gte_0'),
        ),
    ]
