"""The extension in a schema of its own (CREATE EXTENSION fenced_lock SCHEMA fenced), found
through the connection's search_path: a lock, a lease and a guarded write."""

import os

import psycopg
import pytest

from fenced_lock import StaleToken, acquire, acquire_lease, fenced_update

SCHEMA_DSN = os.environ["CLIENTS_SCHEMA_DSN"]


def test_the_library_finds_the_extension_through_search_path():
    with psycopg.connect(SCHEMA_DSN, autocommit=True) as conn:
        assert conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension "
                            "WHERE extname = 'fenced_lock'").fetchone()[0] == "fenced"
        with conn.transaction():
            first = acquire(conn, 1001, 1)
            fenced_update(conn, "documents", 1, first, {"body": "first"})
        with conn.transaction():
            second = acquire(conn, 1001, 1)
            assert second > first
            fenced_update(conn, "documents", 1, second, {"body": "second"})
        with pytest.raises(StaleToken):
            with conn.transaction():
                fenced_update(conn, "documents", 1, first, {"body": "stale"})
        assert conn.execute("SELECT body FROM documents WHERE id = 1").fetchone()[0] == "second"
    with acquire_lease(SCHEMA_DSN, 1001, 2, ttl=30) as lease:
        assert lease.token > second
