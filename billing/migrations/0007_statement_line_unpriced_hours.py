"""Unpriced GPU-hours on statement lines: each line carries the GPU-hours it holds that had no
price (billed at $0), frozen at close like its cost. Lines already closed get 0, which is what
their statements showed; the usage under them is not re-read, since a closed line never changes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0006_statement_egress_lines'),
        ('catalogue', '0001_initial'),
        ('tenants', '0006_gpu_model_in_catalogue'),
    ]

    operations = [
        migrations.AddField(
            model_name='statementline',
            name='unpriced_gpu_hours',
            field=models.DecimalField(decimal_places=4, default=0, max_digits=16),
        ),
        migrations.AddConstraint(
            model_name='statementline',
            constraint=models.CheckConstraint(condition=models.Q(('unpriced_gpu_hours__gte', 0), ('unpriced_gpu_hours__lte', models.F('gpu_hours'))), name='stmtline_unpriced_within_hours'),
        ),
    ]
