"""An index on ``Allocation.ended_at``: billing reads allocations by when they ended (the meter's
lookback window and backlog, a statement close's "is this month fully metered?"), and each read
scanned the whole allocation history without it.

On PostgreSQL it is built CONCURRENTLY: the allocation table is the scheduling loop's (every
cycle starts and ends allocations), and a plain CREATE INDEX would hold the loop's writes back
for the whole build, minutes on a big site's history. Hence a non-atomic migration (as telemetry
0003). The model state is the plain AddIndex it always was, so ``makemigrations`` sees no change
and a site that applied the earlier, plain version of this migration is unaffected. A build that
fails half-way leaves an invalid index behind: drop it (``DROP INDEX CONCURRENTLY
allocation_ended_at``) and migrate again."""

from django.db import migrations, models

from core.schema_ops import add_index_concurrently

INDEX = models.Index(fields=['ended_at'], name='allocation_ended_at')


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('scheduler', '0020_node_cluster_retirement'),
    ]

    operations = [
        add_index_concurrently(app_label="scheduler", model_name="Allocation", index=INDEX),
    ]
