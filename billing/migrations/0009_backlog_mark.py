"""The backlog sweep's mark (``BacklogMark``): where it need not search again, so an hourly sweep
reads the allocations ended since its last one, not the whole history. A new, empty table: the
first sweeps after the upgrade search the whole history once, as before, and set it."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0008_allocation_meter_metered_until'),
    ]

    operations = [
        migrations.CreateModel(
            name='BacklogMark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('ended_before', models.DateTimeField(blank=True, null=True)),
                ('checked_id', models.BigIntegerField(blank=True, null=True)),
                ('seen_id', models.BigIntegerField(blank=True, null=True)),
                ('seen_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(('id', 1)), name='backlogmark_one_row')],
            },
        ),
    ]
