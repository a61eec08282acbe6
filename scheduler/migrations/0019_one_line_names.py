"""Names others see are one line of printable text (core.names). Validators only: no change
in the database."""

import core.names
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0018_job_requested_workers'),
    ]

    operations = [
        migrations.AlterField(
            model_name='dataset',
            name='name',
            field=models.CharField(max_length=200, unique=True, validators=[core.names.validate_name]),
        ),
        migrations.AlterField(
            model_name='job',
            name='dataset',
            field=models.CharField(blank=True, max_length=200, validators=[core.names.validate_name]),
        ),
        migrations.AlterField(
            model_name='job',
            name='dataset_version',
            field=models.CharField(blank=True, max_length=100, validators=[core.names.validate_name]),
        ),
        migrations.AlterField(
            model_name='job',
            name='name',
            field=models.CharField(max_length=200, validators=[core.names.validate_name]),
        ),
        migrations.AlterField(
            model_name='jobarray',
            name='name',
            field=models.CharField(max_length=200, validators=[core.names.validate_name]),
        ),
    ]
