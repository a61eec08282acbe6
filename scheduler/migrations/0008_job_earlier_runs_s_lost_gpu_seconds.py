"""Job's run and loss fields named after their units: ``attained_service_s`` held plain run
seconds of earlier attempts (not GPU-seconds, which its name suggested), ``lost_gpu_s`` holds
GPU-seconds. Column renames: no data changes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0007_bounded_numbers"),
    ]

    operations = [
        migrations.RenameField(
            model_name="job", old_name="attained_service_s", new_name="earlier_runs_s"
        ),
        migrations.RenameField(model_name="job", old_name="lost_gpu_s", new_name="lost_gpu_seconds"),
        migrations.AlterField(
            model_name="job",
            name="lost_gpu_seconds",
            field=models.FloatField(
                default=0.0,
                help_text="GPU-seconds of work lost at requeues (since each checkpoint).",
            ),
        ),
    ]
