"""An index on ``AllocationMeter.metered_until``: the meter's window and a statement close's "is
this month fully metered?" read only the cursors after a time, instead of hashing all of them.

On PostgreSQL it is built CONCURRENTLY: the meter upserts cursors every minute, and a plain
CREATE INDEX over one cursor per allocation ever metered would hold the meter back for the whole
build. Hence a non-atomic migration (as telemetry 0003). The model state is the plain AddIndex it
always was, so ``makemigrations`` sees no change and a site that applied the earlier, plain
version of this migration is unaffected. A build that fails half-way leaves an invalid index
behind: drop it (``DROP INDEX CONCURRENTLY allocmeter_metered_until``) and migrate again."""

from django.db import migrations, models

INDEX = models.Index(fields=['metered_until'], name='allocmeter_metered_until')


def add_index(apps, schema_editor):
    model = apps.get_model('billing', 'AllocationMeter')
    if schema_editor.connection.vendor == 'postgresql':
        schema_editor.add_index(model, INDEX, concurrently=True)
    else:
        schema_editor.add_index(model, INDEX)


def remove_index(apps, schema_editor):
    model = apps.get_model('billing', 'AllocationMeter')
    if schema_editor.connection.vendor == 'postgresql':
        schema_editor.remove_index(model, INDEX, concurrently=True)
    else:
        schema_editor.remove_index(model, INDEX)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('billing', '0007_statement_line_unpriced_hours'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name='allocationmeter', index=INDEX)],
            database_operations=[migrations.RunPython(add_index, remove_index)],
        ),
    ]
