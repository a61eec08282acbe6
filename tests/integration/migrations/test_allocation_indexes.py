"""Scheduler 0021 (``allocation_ended_at``) and billing 0008 (``allocmeter_metered_until``) on
PostgreSQL build their indexes CONCURRENTLY, so a site upgrading a big allocation history keeps
scheduling and metering while they build; on SQLite plainly. Both from an empty database, and
undone and redone on a migrated one.

Runs on PostgreSQL when DATABASE_URL points there (CI), on SQLite otherwise (``engines``: make
test runs it on both)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.conftest import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.engines]

BEFORE = [
    ("scheduler", "0020_node_cluster_retirement"),
    ("billing", "0007_statement_line_unpriced_hours"),
]
INDEXES = {
    "scheduler_allocation": "allocation_ended_at",
    "billing_allocationmeter": "allocmeter_metered_until",
}


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def _latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _indexes_of(table: str) -> dict:
    with connection.cursor() as cursor:
        return connection.introspection.get_constraints(cursor, table)


def test_the_indexes_are_built_concurrently_on_postgresql_and_plainly_on_sqlite():
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    try:
        _migrate(BEFORE)
        for table, index in INDEXES.items():
            assert index not in _indexes_of(table)
        with connection.execute_wrapper(record):
            _migrate(_latest())
    finally:
        _migrate(_latest())

    for table, index in INDEXES.items():
        assert _indexes_of(table)[index]["index"]
        built = [s for s in statements if "CREATE INDEX" in s and f'"{index}"' in s]
        assert len(built) == 1, built
        # PostgreSQL refuses CONCURRENTLY inside a transaction: the migrations are non-atomic.
        assert ("CONCURRENTLY" in built[0]) == (connection.vendor == "postgresql"), built[0]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relname = ANY(%s)",
                [list(INDEXES.values())],
            )
            assert dict(cursor.fetchall()) == {index: True for index in INDEXES.values()}


def test_a_database_migrated_from_empty_has_both_indexes(tmp_path: Path):
    """``manage.py migrate`` on an empty database of the test's engine, in a process of its own
    (as an operator runs it): the whole history applies, these two non-atomic steps among the
    atomic ones."""
    if connection.vendor == "postgresql":
        import psycopg

        server = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
        name = f"migrate_zero_{uuid.uuid4().hex[:8]}"
        url = f"{server}/{name}"
        admin = psycopg.connect(f"{server}/postgres", autocommit=True)
        admin.execute(f'CREATE DATABASE "{name}"')
    else:
        url = f"sqlite:///{tmp_path / 'zero.sqlite3'}"
    try:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url},
            check=True,
            timeout=240,
        )
        found = _indexes_in(url)
    finally:
        if connection.vendor == "postgresql":
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.close()
    assert found == {index: True for index in INDEXES.values()}


def _indexes_in(url: str) -> dict[str, bool]:
    """The two indexes found in the database at ``url``, each with whether it is usable."""
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            names = [
                row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
            ]
        return {name: True for name in names if name in INDEXES.values()}
    import psycopg

    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname = ANY(%s)",
            [list(INDEXES.values())],
        ).fetchall()
    return dict(rows)
