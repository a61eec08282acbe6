"""An index on (node, time) of the raw samples: the rollup of one node's late minutes reads that
node's samples only, not every node's samples of those minutes through the time index.

On PostgreSQL it is built CONCURRENTLY: the raw table is the ingest's hot table, and a plain
CREATE INDEX would hold every agent's batches back for the whole build (minutes on a day of a big
cluster's samples). Hence a non-atomic migration. A build that fails half-way leaves an invalid
index behind: drop it (``DROP INDEX CONCURRENTLY gpusample_node_time``) and migrate again."""

from django.db import migrations, models

INDEX = models.Index(fields=["node", "time"], name="gpusample_node_time")


def add_index(apps, schema_editor):
    model = apps.get_model("telemetry", "GpuSample")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(model, INDEX, concurrently=True)
    else:
        schema_editor.add_index(model, INDEX)


def remove_index(apps, schema_editor):
    model = apps.get_model("telemetry", "GpuSample")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.remove_index(model, INDEX, concurrently=True)
    else:
        schema_editor.remove_index(model, INDEX)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('telemetry', '0002_rollup_pending'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name='gpusample', index=INDEX)],
            database_operations=[migrations.RunPython(add_index, remove_index)],
        ),
    ]
