"""Faults on real processes: a holder paused past its ttl, its link cut or blackholed, the
server restarted. Each ends with the holder told, and its late write refused."""

import os
import signal
import time

import psycopg
import pytest

from fenced_lock import acquire_lease, fenced_update, try_acquire_lease
from fenced_lock._core import LOST_DEADLINE
from conftest import (DIRECT, assert_told_of_link_fault, holder_process, restart_server,
                      wait_until)


def body(admin, row):
    return admin.execute("SELECT body FROM documents WHERE id = %s", (row,)).fetchone()[0]


def test_paused_holder(key, doc_id, admin):
    """SIGSTOP past the ttl: a successor takes the lease and writes; on resume the holder
    finds the lease lost before any renewal (by its validity, on its monotonic clock), and its
    write with the old token is refused."""
    holder = holder_process(DIRECT, *key, 2.0, doc_id)
    try:
        token = int(holder.stdout.readline().split()[1])
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(2.5)
        with acquire_lease(DIRECT, *key, ttl=10) as successor:
            fenced_update(admin, "documents", doc_id, successor.token, {"body": "successor"})
            os.kill(holder.pid, signal.SIGCONT)
            output = holder.communicate(timeout=20)[0]
    finally:
        holder.kill()
    assert f"lost {LOST_DEADLINE}\n" in output, output
    assert f"refused {token} {successor.token}\n" in output, output
    assert body(admin, doc_id) == "successor"


@pytest.mark.parametrize("fault", ["cut", "blackhole"])
def test_link_fault(proxy, key, admin, fault):
    """The lease's connection reset (cut) or silent (blackhole: a partition, no byte passes
    either way): the holder is told within the ttl, and the lease is not taken again behind
    its back with a new token."""
    ttl = 3.0
    reasons = []
    lease = acquire_lease(proxy.dsn, *key, ttl=ttl, on_lost=reasons.append)
    time.sleep(1.2)  # one renewal through the proxy first
    assert not lease.lost.is_set()
    faulted_at = time.monotonic()
    getattr(proxy, fault)()
    assert lease.lost.wait(ttl), f"not told within the ttl ({ttl} s)"
    told_after = time.monotonic() - faulted_at
    proxy.restore()
    assert_told_of_link_fault(fault, reasons, told_after, ttl, lease.token, admin, key)
    assert lease.release() in (True, False)
    assert wait_until(lambda: try_acquire_lease(DIRECT, *key, ttl=1) is not None, ttl + 2)


def test_server_restarted(key, doc_id):
    """The server restarts under the holder: its lease's session is gone, so it is told (a
    connection lost is a lease lost, never re-taken with a new token), and once the ttl has
    passed a successor gets a larger token. (Last in the suite: it ends every session.)"""
    reasons = []
    lease = acquire_lease(DIRECT, *key, ttl=3, on_lost=reasons.append)
    restart_server()
    assert lease.lost.wait(3), "not told within the ttl"
    assert "connection" in reasons[0], reasons
    assert lease.release() is False
    deadline = time.monotonic() + 6
    successor = None
    while successor is None and time.monotonic() < deadline:
        successor = try_acquire_lease(DIRECT, *key, ttl=5)
        time.sleep(0.1)
    assert successor is not None and successor.token > lease.token
    with successor, psycopg.connect(DIRECT, autocommit=True) as conn:
        fenced_update(conn, "documents", doc_id, successor.token, {"body": "after restart"})
