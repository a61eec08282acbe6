"""Migration operations shared by the apps' migrations.

A migration that imports from here freezes nothing of it: change an operation only in ways that
build the same schema, because migrations already applied on sites will not run again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

if TYPE_CHECKING:  # psycopg is loaded only where PostgreSQL is the database
    from django.db.backends.postgresql.schema import DatabaseSchemaEditor as PostgresSchemaEditor


def add_index_concurrently(
    *, app_label: str, model_name: str, index: models.Index
) -> migrations.SeparateDatabaseAndState:
    """An ``AddIndex`` whose build on PostgreSQL is ``CREATE INDEX CONCURRENTLY`` (writes to the
    table go on while it builds; a plain build holds them back for minutes on a big table), and
    plain on SQLite. The model state is the plain ``AddIndex``, so ``makemigrations`` sees no
    change against a migration that used one. The migration must be non-atomic
    (``atomic = False``): PostgreSQL builds concurrently only outside a transaction. A build that
    fails half-way leaves an invalid index: drop it (``DROP INDEX CONCURRENTLY <name>``) and
    migrate again."""

    # Only PostgreSQL's schema editor takes ``concurrently`` (a cast: the vendor says it is that
    # editor, which mypy cannot follow).
    def forwards(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        model = apps.get_model(app_label, model_name)
        if schema_editor.connection.vendor == "postgresql":
            cast("PostgresSchemaEditor", schema_editor).add_index(model, index, concurrently=True)
        else:
            schema_editor.add_index(model, index)

    def backwards(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        model = apps.get_model(app_label, model_name)
        if schema_editor.connection.vendor == "postgresql":
            cast("PostgresSchemaEditor", schema_editor).remove_index(
                model, index, concurrently=True
            )
        else:
            schema_editor.remove_index(model, index)

    return migrations.SeparateDatabaseAndState(
        state_operations=[migrations.AddIndex(model_name=model_name.lower(), index=index)],
        database_operations=[migrations.RunPython(forwards, backwards)],
    )
