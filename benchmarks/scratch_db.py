"""A scratch PostgreSQL database for a benchmark run: created empty, dropped afterwards."""

from __future__ import annotations


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
