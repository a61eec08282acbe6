from django.db import migrations, models
from django.db.models import F


def gpu_seconds_to_seconds(apps, schema_editor):
    # Requeues used to add run time x GPUs, which the engine multiplied by the GPUs again.
    Job = apps.get_model("scheduler", "Job")
    Job.objects.filter(attained_service_s__gt=0).update(
        attained_service_s=F("attained_service_s") / (F("workers") * F("gpus_per_worker"))
    )


def seconds_to_gpu_seconds(apps, schema_editor):
    Job = apps.get_model("scheduler", "Job")
    Job.objects.filter(attained_service_s__gt=0).update(
        attained_service_s=F("attained_service_s") * F("workers") * F("gpus_per_worker")
    )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0004_job_arrays"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="attained_service_s",
            field=models.FloatField(
                default=0.0,
                help_text="Seconds the job ran in earlier attempts, lost work included.",
            ),
        ),
        migrations.RunPython(gpu_seconds_to_seconds, seconds_to_gpu_seconds),
    ]
