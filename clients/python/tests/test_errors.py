"""Typed errors from the SQLSTATEs the server raises."""

import threading

import psycopg
import pytest

from fenced_lock import (ConnectionLost, LockBusy, ReadOnly, Retryable, StaleToken, acquire,
                         fence_check, from_driver)
from conftest import DIRECT


def test_read_only_transaction(key):
    with psycopg.connect(DIRECT) as conn:
        with pytest.raises(ReadOnly) as refused:
            with conn.transaction():
                conn.execute("SET TRANSACTION READ ONLY")
                acquire(conn, *key)
        assert refused.value.sqlstate == "25006"


def test_deadlock_is_retryable(key):
    ns, id = key
    barrier = threading.Barrier(2)
    outcomes = []

    def take(first, second):
        with psycopg.connect(DIRECT) as conn:
            try:
                with conn.transaction():
                    acquire(conn, ns, first)
                    barrier.wait()
                    acquire(conn, ns, second)
                outcomes.append("ok")
            except Retryable as error:
                outcomes.append(error.sqlstate)

    threads = [threading.Thread(target=take, args=pair) for pair in ((id, id + 1), (id + 1, id))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["40P01", "ok"]


def test_terminated_backend_is_connection_lost(key, admin):
    conn = psycopg.connect(DIRECT)
    try:
        acquire(conn, *key)  # psycopg opened the transaction
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(ConnectionLost):
            acquire(conn, key[0], key[1] + 1)
    finally:
        conn.close()


def test_stale_token_and_unmapped_errors(admin):
    fence_check(admin, "errors-resource", 10)
    with pytest.raises(StaleToken) as stale:
        fence_check(admin, "errors-resource", 5)
    assert (stale.value.offered, stale.value.accepted) == (5, 10)
    assert stale.value.hint and stale.value.detail
    # An error of no type is the driver's own.
    with pytest.raises(psycopg.errors.UndefinedFunction):
        try:
            admin.execute("SELECT no_such_function()")
        except psycopg.Error as error:
            assert from_driver(error) is error
            raise


def test_lock_timeout_is_busy(key):
    with psycopg.connect(DIRECT) as a, psycopg.connect(DIRECT) as b:
        with a.transaction():
            acquire(a, *key)
            with pytest.raises(LockBusy):
                with b.transaction():
                    b.execute("SET LOCAL lock_timeout = '100ms'")
                    acquire(b, *key)
