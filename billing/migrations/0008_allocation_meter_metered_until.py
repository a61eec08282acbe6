"""An index on ``AllocationMeter.metered_until``: the meter's window and a statement close's "is
this month fully metered?" read only the cursors after a time, instead of hashing all of them.

On PostgreSQL it is built CONCURRENTLY: the meter upserts cursors every minute, and a plain
CREATE INDEX over one cursor per allocation ever metered would hold the meter back for the whole
build. Hence a non-atomic migration (as telemetry 0003). The model state is the plain AddIndex it
always was, so ``makemigrations`` sees no change and a site that applied the earlier, plain
version of this migration is unaffected. A build that fails half-way leaves an invalid index
behind: drop it (``DROP INDEX CONCURRENTLY allocmeter_metered_until``) and migrate again."""

from django.db import migrations, models

from core.schema_ops import add_index_concurrently

INDEX = models.Index(fields=['metered_until'], name='allocmeter_metered_until')


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('billing', '0007_statement_line_unpriced_hours'),
    ]

    operations = [
        add_index_concurrently(app_label="billing", model_name="AllocationMeter", index=INDEX),
    ]
