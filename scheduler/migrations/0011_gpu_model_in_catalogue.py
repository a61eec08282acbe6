"""GpuModel moved to the catalogue app (catalogue 0001): this app's foreign keys now name
catalogue.GpuModel. State only: the database's columns and constraints already point at the same
table (scheduler_gpumodel), which stays."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0001_initial'),
        ('scheduler', '0010_job_checkpoint_on_advice'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='job',
                    name='gpu_model',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='catalogue.gpumodel'),
                ),
                migrations.AlterField(
                    model_name='node',
                    name='gpu_model',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='nodes', to='catalogue.gpumodel'),
                ),
            ],
            database_operations=[],
        ),
    ]
