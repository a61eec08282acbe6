"""An index on ``Allocation.ended_at``: billing reads allocations by when they ended (the meter's
lookback window and backlog, a statement close's "is this month fully metered?"), and each read
scanned the whole allocation history without it."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0020_node_cluster_retirement'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='allocation',
            index=models.Index(fields=['ended_at'], name='allocation_ended_at'),
        ),
    ]
