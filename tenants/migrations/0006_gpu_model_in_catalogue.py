"""GpuModel moved to the catalogue app (catalogue 0001): this app's foreign keys now name
catalogue.GpuModel. State only: the database's columns and constraints already point at the same
table (scheduler_gpumodel), which stays."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0001_initial'),
        ('tenants', '0005_team_entitlements'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='quota',
                    name='gpu_model',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='quotas', to='catalogue.gpumodel'),
                ),
                migrations.AlterField(
                    model_name='quotarequest',
                    name='gpu_model',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='quota_requests', to='catalogue.gpumodel'),
                ),
            ],
            database_operations=[],
        ),
    ]
