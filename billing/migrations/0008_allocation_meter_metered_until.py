"""An index on ``AllocationMeter.metered_until``: the meter's window and a statement close's "is
this month fully metered?" read only the cursors after a time, instead of hashing all of them."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0007_statement_line_unpriced_hours'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='allocationmeter',
            index=models.Index(fields=['metered_until'], name='allocmeter_metered_until'),
        ),
    ]
