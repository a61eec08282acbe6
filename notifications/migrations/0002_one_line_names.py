"""Names others see are one line of printable text (core.names). Validators only: no change
in the database."""

import core.names
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='webhook',
            name='name',
            field=models.CharField(max_length=100, validators=[core.names.validate_name]),
        ),
    ]
