"""An index on (node, time) of the raw samples: the rollup of one node's late minutes reads that
node's samples only, not every node's samples of those minutes through the time index.

On PostgreSQL it is built CONCURRENTLY: the raw table is the ingest's hot table, and a plain
CREATE INDEX would hold every agent's batches back for the whole build (minutes on a day of a big
cluster's samples). Hence a non-atomic migration. A build that fails half-way leaves an invalid
index behind: drop it (``DROP INDEX CONCURRENTLY gpusample_node_time``) and migrate again."""

from django.db import migrations, models

from core.schema_ops import add_index_concurrently

INDEX = models.Index(fields=["node", "time"], name="gpusample_node_time")


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('telemetry', '0002_rollup_pending'),
    ]

    operations = [
        add_index_concurrently(app_label="telemetry", model_name="GpuSample", index=INDEX),
    ]
