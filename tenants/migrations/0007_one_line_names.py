"""Names others see are one line of printable text (core.names). Validators only: no change
in the database."""

import core.names
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0006_gpu_model_in_catalogue'),
    ]

    operations = [
        migrations.AlterField(
            model_name='apitoken',
            name='name',
            field=models.CharField(max_length=100, validators=[core.names.validate_name]),
        ),
        migrations.AlterField(
            model_name='team',
            name='name',
            field=models.CharField(max_length=200, validators=[core.names.validate_name]),
        ),
    ]
