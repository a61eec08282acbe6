"""A scratch PostgreSQL database for a benchmark run: created empty, dropped afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def _admin_dsn(server: str) -> str:
    return f"{server.rstrip('/')}/postgres"


def create_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(_admin_dsn(server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(_admin_dsn(server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


SERVER = "postgresql://postgres@127.0.0.1:5432"


@contextmanager
def django_on_scratch_database(name: str, server: str = SERVER) -> Iterator[None]:
    """Point Django at a new empty database ``name`` on ``server`` (its settings not loaded
    yet; no Redis: the embedded cache and channel layer), and drop it afterwards."""
    create_database(server, name)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="gpuplatform.settings",
        DATABASE_URL=f"{server.replace('postgresql://', 'postgres://', 1)}/{name}",
        LOG_LEVEL="WARNING",
    )
    os.environ.pop("REDIS_URL", None)
    try:
        yield
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(server, name)
