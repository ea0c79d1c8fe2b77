"""The conformance scenarios (clients/conformance.md), directly and through PgBouncer."""

import threading
import time

import psycopg
import pytest

import fenced_lock
from fenced_lock import (LeaderElection, LeaseLost, LockBusy, NotInTransaction, StaleToken,
                         acquire, acquire_lease, fence_check, fenced_update, try_acquire,
                         try_acquire_lease)
from conftest import DIRECT, lease_row, wait_until


def connect(dsn):
    # The driver's defaults (prepare_threshold 5): the library must prepare nothing itself.
    return psycopg.connect(dsn)


def test_installed_from_the_wheel():
    assert "site-packages" in fenced_lock.__file__, fenced_lock.__file__


def test_transaction_lock_take(dsn, key):
    with connect(dsn) as a, connect(dsn) as b:
        with a.transaction():
            token = acquire(a, *key)
            assert token > 0
            assert a.execute("SELECT current_fence(%s::int4, %s::int4)", key).fetchone()[0] == token
            with b.transaction():
                assert try_acquire(b, *key) is None
        with b.transaction():
            later = acquire(b, *key, timeout=1)
        assert later > token


def test_transaction_lock_outside_a_transaction(dsn, key):
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(NotInTransaction):
            acquire(conn, *key)
        # The server's own refusal maps to the same type.
        with pytest.raises(NotInTransaction) as refused:
            with fenced_lock.errors.translated():
                conn.execute("SELECT acquire_fenced(%s::int4, %s::int4)", key)
        assert refused.value.sqlstate == "25P01"


def test_busy(dsn, key):
    with connect(dsn) as a, connect(dsn) as b:
        with a.transaction():
            acquire(a, *key)
            with pytest.raises(LockBusy) as busy:
                with b.transaction():
                    acquire(b, *key, timeout=0.2)
            assert busy.value.sqlstate == "55P03"
    with acquire_lease(dsn, *key, ttl=5):
        assert try_acquire_lease(dsn, *key, ttl=5) is None
        with pytest.raises(LockBusy):
            acquire_lease(dsn, *key, ttl=5)


def test_no_prepared_statements(key, doc_id):
    """Behind a transaction-mode pooler a named statement may be missing on the next server
    connection: the library prepares none, even past psycopg's prepare_threshold (5)."""
    with psycopg.connect(DIRECT) as conn:
        for _ in range(8):
            with conn.transaction():
                token = acquire(conn, *key)
                fenced_update(conn, "documents", doc_id, token, {"body": "x"})
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
        assert prepared == 0


def test_lease_take_renew_release(dsn, key, admin):
    with acquire_lease(dsn, *key, ttl=1.2) as lease:
        assert lease.token > 0 and not lease.lost.is_set()
        # Three times its ttl: only the renewer keeps it.
        time.sleep(3.6)
        assert not lease.lost.is_set(), lease.lost_reason
        assert lease_row(admin, *key) == (lease.token, lease.owner, True)
        assert 0 < lease.valid_for <= 1.2
        lease.check()
    assert lease.lost.is_set() and lease.lost_reason == "released"
    assert lease_row(admin, *key) is None
    with pytest.raises(LeaseLost):
        lease.check()


def test_lease_wait_with_timeout(dsn, key):
    with acquire_lease(dsn, *key, ttl=10) as held:
        started = time.monotonic()
        assert try_acquire_lease(dsn, *key, ttl=5, wait=0.5) is None
        assert 0.45 <= time.monotonic() - started < 3
        threading.Timer(0.3, held.release).start()
        started = time.monotonic()
        with acquire_lease(dsn, *key, ttl=5, wait=5) as next_holder:
            # Woken at the release's commit, not at the end of the wait or the ttl.
            assert time.monotonic() - started < 2
            assert next_holder.token > held.token


def test_stale_write_refused(dsn, key, doc_id):
    first = acquire_lease(dsn, *key, ttl=5)
    first.release()
    with acquire_lease(dsn, *key, ttl=5) as second, psycopg.connect(dsn, autocommit=True) as conn:
        assert second.token > first.token
        fenced_update(conn, "documents", doc_id, second.token, {"body": "second"})
        with pytest.raises(StaleToken) as stale:
            fenced_update(conn, "documents", doc_id, first.token, {"body": "first"})
        assert (stale.value.offered, stale.value.accepted) == (first.token, second.token)
        assert stale.value.sqlstate == "SF001"
        body = conn.execute("SELECT body FROM documents WHERE id = %s", (doc_id,)).fetchone()[0]
        assert body == "second"
        resource = f"resource-{key[1]}"
        fence_check(conn, resource, second.token)
        with pytest.raises(StaleToken) as stale:
            fence_check(conn, resource, first.token)
        assert stale.value.accepted == second.token and stale.value.resource == resource


def test_owner_rule(dsn, key):
    lease = acquire_lease(dsn, *key, ttl=1.5, owner="worker-a")
    assert try_acquire_lease(dsn, *key, ttl=5, owner="worker-b") is None
    # The same owner again (another process of it, behind a pooler): the same lease and
    # token, not a new one; its release ends the lease for both handles.
    again = acquire_lease(dsn, *key, ttl=5, owner="worker-a")
    assert again.token == lease.token
    assert again.release()
    assert lease.lost.wait(1.5) and lease.lost_reason == fenced_lock._core.LOST_NOT_HELD
    with acquire_lease(dsn, *key, ttl=5, owner="worker-b") as other:
        assert other.token > lease.token
        # Owners the library makes differ from call to call.
        assert try_acquire_lease(dsn, *key, ttl=5) is None


def test_leader_handover(dsn, key):
    terms, stopped, stops = [], [], [threading.Event(), threading.Event()]
    elected = threading.Condition()

    def candidate(index):
        def on_elected(term, lost):
            with elected:
                terms.append((index, term, time.monotonic()))
                elected.notify_all()
            lost.wait()
        LeaderElection(dsn, *key, ttl=2, retry_period=1).run(
            on_elected, lambda: stopped.append(index), stop=stops[index])

    threads = [threading.Thread(target=candidate, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    with elected:
        assert elected.wait_for(lambda: len(terms) == 1, 5)
    leader, term, _ = terms[0]
    time.sleep(0.5)
    assert len(terms) == 1  # one leader at a time
    stopped_at = time.monotonic()
    stops[leader].set()
    with elected:
        assert elected.wait_for(lambda: len(terms) == 2, 5)
    follower, next_term, at = terms[1]
    assert follower != leader and next_term > term
    # Handed over at the release, well within the ttl.
    assert at - stopped_at < 1.5
    # The stopped leader is told its term ended (after its release); the follower leads on.
    assert wait_until(lambda: len(stopped) == 1, 2) and stopped == [leader]
    stops[follower].set()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    assert stopped == [leader, follower]


def test_lost_when_no_longer_held(dsn, key, admin):
    """A successor took over: the holder is told at its next renewal (within a third of the
    ttl), with the reason, through the event and the callback."""
    reasons = []
    lease = acquire_lease(dsn, *key, ttl=1.5, on_lost=reasons.append)
    assert admin.execute("SELECT release_lease(%s::int4, %s::int4, %s::int8)",
                         (*key, lease.token)).fetchone()[0]
    with acquire_lease(dsn, *key, ttl=5) as successor:
        assert lease.lost.wait(1.5)
        assert reasons == [fenced_lock._core.LOST_NOT_HELD]
        with pytest.raises(LeaseLost):
            lease.check()
        assert lease.release() is False
        assert lease_row(admin, *key)[0] == successor.token
    assert wait_until(lambda: lease_row(admin, *key) is None, 1)
