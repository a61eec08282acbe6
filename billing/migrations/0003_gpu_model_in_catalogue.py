"""GpuModel moved to the catalogue app (catalogue 0001): this app's foreign keys now name
catalogue.GpuModel. State only: the database's columns and constraints already point at the same
table (scheduler_gpumodel), which stays."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0002_bounded_numbers'),
        ('catalogue', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='lostwork',
                    name='gpu_model',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='lost_work', to='catalogue.gpumodel'),
                ),
                migrations.AlterField(
                    model_name='pricerate',
                    name='gpu_model',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='price_rates', to='catalogue.gpumodel'),
                ),
                migrations.AlterField(
                    model_name='statementline',
                    name='gpu_model',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='catalogue.gpumodel'),
                ),
                migrations.AlterField(
                    model_name='usagedaily',
                    name='gpu_model',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='catalogue.gpumodel'),
                ),
                migrations.AlterField(
                    model_name='usagerecord',
                    name='gpu_model',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='usage', to='catalogue.gpumodel'),
                ),
            ],
            database_operations=[],
        ),
    ]
