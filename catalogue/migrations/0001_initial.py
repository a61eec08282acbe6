"""GpuModel moves from the scheduler app to the catalogue: the model's state only. Its table
(``scheduler_gpumodel``), rows, ids and the foreign keys pointing at it stay as they are; the
content type (and so the permissions and admin log entries) is renamed to this app."""

import django.core.validators
from django.db import migrations, models


def content_type_to_catalogue(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="scheduler", model="gpumodel").update(
        app_label="catalogue"
    )


def content_type_to_scheduler(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="catalogue", model="gpumodel").update(
        app_label="scheduler"
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("scheduler", "0009_attempt_records"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="GpuModel",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.SlugField(max_length=64, unique=True)),
                        (
                            "memory_gib",
                            models.PositiveIntegerField(
                                default=0,
                                validators=[
                                    django.core.validators.MinValueValidator(0),
                                    django.core.validators.MaxValueValidator(100000),
                                ],
                            ),
                        ),
                    ],
                    options={"db_table": "scheduler_gpumodel", "ordering": ["name"]},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_to_catalogue, content_type_to_scheduler),
    ]
