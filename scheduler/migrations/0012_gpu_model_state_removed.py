"""The scheduler app forgets GpuModel (now catalogue.GpuModel, catalogue 0001) once every
foreign key names the catalogue's. State only: the table scheduler_gpumodel stays, it is the
catalogue's."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0003_gpu_model_in_catalogue'),
        ('scheduler', '0011_gpu_model_in_catalogue'),
        ('tenants', '0006_gpu_model_in_catalogue'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='GpuModel',
                ),
            ],
            database_operations=[],
        ),
    ]
