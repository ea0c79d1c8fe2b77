"""The asyncio API (fenced_lock.aio): the same scenarios on AsyncConnection and tasks."""

import asyncio
import time

import psycopg
import pytest

from fenced_lock import LeaseLost, LockBusy, NotInTransaction, StaleToken, aio
from fenced_lock._core import LOST_DEADLINE, LOST_NOT_HELD
from conftest import DIRECT, assert_told_of_link_fault, lease_row


def run(coroutine):
    return asyncio.run(coroutine)


def test_transaction_lock(dsn, key):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(dsn) as a, \
                await psycopg.AsyncConnection.connect(dsn, autocommit=True) as b:
            async with a.transaction():
                token = await aio.acquire(a, *key)
                with pytest.raises(NotInTransaction):
                    await aio.try_acquire(b, *key)
                async with b.transaction():
                    assert await aio.try_acquire(b, *key) is None
                    with pytest.raises(LockBusy):
                        await aio.acquire(b, *key, timeout=0.1)
            async with b.transaction():
                assert await aio.acquire(b, *key) > token
    run(scenario())


def test_lease_renew_release_and_stale_write(dsn, key, doc_id, admin):
    async def scenario():
        async with await aio.acquire_lease(dsn, *key, ttl=1.2) as lease:
            await asyncio.sleep(3.0)
            assert not lease.lost.is_set(), lease.lost_reason
            assert lease_row(admin, *key) == (lease.token, lease.owner, True)
            assert await aio.try_acquire_lease(dsn, *key, ttl=5) is None
        assert lease.lost_reason == "released" and lease_row(admin, *key) is None
        async with await aio.acquire_lease(dsn, *key, ttl=5, wait=1) as successor, \
                await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await aio.fenced_update(conn, "documents", doc_id, successor.token, {"body": "b"})
            with pytest.raises(StaleToken) as stale:
                await aio.fenced_update(conn, "documents", doc_id, lease.token, {"body": "a"})
            assert stale.value.accepted == successor.token
            await aio.fence_check(conn, f"aio-{key[1]}", successor.token)
            with pytest.raises(StaleToken):
                await aio.fence_check(conn, f"aio-{key[1]}", lease.token)
    run(scenario())


def test_lost_when_no_longer_held(key, admin):
    async def scenario():
        reasons = []
        lease = await aio.acquire_lease(DIRECT, *key, ttl=1.5, on_lost=reasons.append)
        admin.execute("SELECT release_lease(%s::int4, %s::int4, %s::int8)", (*key, lease.token))
        await asyncio.wait_for(lease.lost.wait(), 1.5)
        assert reasons == [LOST_NOT_HELD]
        with pytest.raises(LeaseLost):
            lease.check()
        assert await lease.release() is False
    run(scenario())


def test_stalled_loop_finds_out_at_once(key):
    """An event loop blocked past the validity (a long synchronous call): the holder's first
    check after it says lost, before the renewer has run."""
    async def scenario():
        lease = await aio.acquire_lease(DIRECT, *key, ttl=1.5)
        time.sleep(1.6)  # blocks the loop: the renewer cannot run
        with pytest.raises(LeaseLost) as lost:
            lease.check()
        assert lost.value.reason == LOST_DEADLINE
        await lease.release()
    run(scenario())


def test_leader_handover(dsn, key):
    async def scenario():
        terms = []
        stops = [asyncio.Event(), asyncio.Event()]
        changed = asyncio.Event()

        def candidate(index):
            async def on_elected(term, lost):
                terms.append((index, term, time.monotonic()))
                changed.set()
                await lost.wait()
            return aio.AsyncLeaderElection(dsn, *key, ttl=2, retry_period=1).run(
                on_elected, stop=stops[index])

        tasks = [asyncio.ensure_future(candidate(i)) for i in (0, 1)]
        while not terms:
            await asyncio.wait_for(changed.wait(), 5)
            changed.clear()
        leader, term, _ = terms[0]
        await asyncio.sleep(0.5)
        assert len(terms) == 1
        stopped_at = time.monotonic()
        stops[leader].set()
        while len(terms) < 2:
            await asyncio.wait_for(changed.wait(), 5)
            changed.clear()
        follower, next_term, at = terms[1]
        assert follower != leader and next_term > term and at - stopped_at < 1.5
        stops[follower].set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
    run(scenario())


@pytest.mark.parametrize("fault", ["cut", "blackhole"])
def test_link_fault(proxy, key, admin, fault):
    """The asyncio lease's connection reset (cut) or silent (blackhole): told within the ttl,
    and the lease not taken again behind its back with a new token."""
    async def scenario():
        ttl = 3.0
        reasons = []
        lease = await aio.acquire_lease(proxy.dsn, *key, ttl=ttl, on_lost=reasons.append)
        await asyncio.sleep(1.2)  # one renewal through the proxy first
        assert not lease.lost.is_set()
        faulted_at = time.monotonic()
        getattr(proxy, fault)()
        await asyncio.wait_for(lease.lost.wait(), ttl)
        told_after = time.monotonic() - faulted_at
        proxy.restore()
        assert_told_of_link_fault(fault, reasons, told_after, ttl, lease.token, admin, key)
        assert await lease.release() in (True, False)
    run(scenario())
