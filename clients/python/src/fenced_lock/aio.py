"""The asyncio API: the same as the blocking one, on psycopg's AsyncConnection, with a task
renewing each lease and an asyncio.Event as its lost signal."""

import asyncio
import time
from typing import Any, Awaitable, Callable, Mapping, Optional

import psycopg
from psycopg.pq import TransactionStatus

from . import _core
from ._core import Duration, Params
from .errors import ConnectionLost, LeaseLost, LockBusy, NotInTransaction, Retryable, translated

#: Opens a lease's own connection: `psycopg.AsyncConnection.connect(conninfo,
#: autocommit=True, prepare_threshold=None)` by default.
Connect = Callable[[str], Awaitable[psycopg.AsyncConnection]]


async def _value(conn: psycopg.AsyncConnection, query: str, params: Params) -> Any:
    with translated():
        row = await (await conn.execute(query, params, prepare=False)).fetchone()
    return row[0] if row else None


def _require_transaction(conn: psycopg.AsyncConnection) -> None:
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise NotInTransaction(
            "a transaction-scoped lock needs a transaction: use `async with conn.transaction():` "
            "(outside one the lock would end with the statement)", sqlstate="25P01")


async def acquire(conn: psycopg.AsyncConnection, ns: int, id: int, *,
                  timeout: Optional[Duration] = None, shared: bool = False) -> int:
    """Takes the transaction-scoped lock on (ns, id) inside the caller's transaction, waiting
    (at most `timeout`, then LockBusy), and returns its fencing token."""
    _require_transaction(conn)
    token = _core.token(await _value(conn, *_core.acquire_args(ns, id, timeout, shared)))
    assert token is not None, "acquire_fenced returns a token or raises"
    return token


async def try_acquire(conn: psycopg.AsyncConnection, ns: int, id: int, *,
                      shared: bool = False) -> Optional[int]:
    """The token, or None at once when another session holds (ns, id)."""
    _require_transaction(conn)
    return _core.token(await _value(conn, _core.TRY_ACQUIRE[shared], (ns, id)))


async def fenced_update(conn: psycopg.AsyncConnection, table: str, key: Any, token: int,
                        changes: Mapping[str, Any], *, key_column: str = "id",
                        fence_column: str = "fence") -> None:
    """Writes `changes` to the row `key` of `table` and its fence to `token`, unless the row
    accepted a larger token: then StaleToken, and nothing is written."""
    await _value(conn, _core.FENCED_UPDATE,
                 _core.fenced_update_args(table, key, token, changes, key_column, fence_column))


async def fence_check(conn: psycopg.AsyncConnection, resource: str, token: int) -> None:
    """Records `token` as the highest `resource` accepted, or raises StaleToken."""
    await _value(conn, _core.FENCE_CHECK, (resource, token))


async def _connect(conninfo: str) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(conninfo, autocommit=True,
                                                 prepare_threshold=None)


class AsyncLease:
    """A lease renewed by a task every third of its ttl on a connection of its own, until
    `release()` (or the end of an `async with` block). `lost` (an asyncio.Event) is set when it
    ends; `on_lost(reason)` is called only for a loss: a renewal that found it no longer held,
    failed, or did not complete before its validity ended (less the margin)."""

    def __init__(self, conn: psycopg.AsyncConnection, ns: int, id: int, owner: str, token: int,
                 clock: _core.LeaseClock, on_lost: Optional[Callable[[str], None]]) -> None:
        self.ns, self.id, self.owner, self.token = ns, id, owner, token
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._conn, self._clock, self._on_lost = conn, clock, on_lost
        self._broken = False
        # True while a renewal is on the connection: release waits for it rather than cancel
        # it (a statement cancelled midway leaves the connection unusable).
        self._renewing = False
        # A renewal given up on at the deadline, still to be reaped at release.
        self._hung: Optional["asyncio.Future[Any]"] = None
        self._renewer = asyncio.create_task(self._renew(), name=f"fenced_lock renewer {ns}:{id}")

    @property
    def valid_for(self) -> float:
        """Seconds the lease is still known to be valid (0 once lost)."""
        return 0.0 if self.lost.is_set() else max(0.0, self._clock.remaining())

    def check(self) -> None:
        """Raises LeaseLost unless the lease is still known to be valid (the clock is read
        here: a holder whose loop stalled past the validity finds out at once)."""
        if not self.lost.is_set() and self._clock.remaining() <= 0:
            self._lose(_core.LOST_DEADLINE)
        if self.lost.is_set():
            raise LeaseLost(self.lost_reason or _core.LOST_DEADLINE)

    def _lose(self, reason: str, notify: bool = True) -> None:
        if self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        if notify and self._on_lost is not None:
            try:
                self._on_lost(reason)
            except Exception:  # noqa: BLE001 - the callback's failure must not stop the renewer
                pass

    async def _renew(self) -> None:
        ttl = _core.interval(self._clock.ttl)
        while not self.lost.is_set():
            await asyncio.sleep(max(0.0, self._clock.next_renewal - time.monotonic()))
            if self.lost.is_set():
                return
            sent_at = time.monotonic()
            remaining = self._clock.remaining(sent_at)
            self._renewing = True
            renewal = asyncio.ensure_future(
                _value(self._conn, _core.RENEW_LEASE, (self.ns, self.id, self.token, ttl)))
            # A renewal hung on a dead link never returns in time: the lease is lost at its
            # deadline. Not wait_for: cancelling the query makes psycopg send a cancel request,
            # which on that link hangs too, and wait_for would wait for it.
            await asyncio.wait([renewal], timeout=max(0.0, remaining))
            if not renewal.done():
                self._broken = True
                self._hung = renewal
                renewal.cancel()
                self._renewing = False
                return self._lose(_core.LOST_DEADLINE)
            try:
                expires = renewal.result()
            except (LockBusy, Retryable):
                self._clock.failed(time.monotonic())
                continue
            except ConnectionLost as error:
                self._broken = True
                return self._lose(f"the connection was lost: {error}")
            except Exception as error:  # noqa: BLE001 - any other failure loses the lease
                return self._lose(f"renewal failed: {error}")
            finally:
                self._renewing = False
            if expires is None:
                return self._lose(_core.LOST_NOT_HELD)
            if not self.lost.is_set():
                self._clock.renewed(sent_at)

    async def release(self) -> bool:
        """Ends the lease: True when the server released it (it was still this holder's).
        `lost` is set (reason "released", no callback)."""
        was_lost = self.lost.is_set()
        self._lose(_core.LOST_RELEASED, notify=False)
        if not self._renewing:
            self._renewer.cancel()
        await asyncio.wait([self._renewer])
        released = False
        try:
            if not self._broken:
                released = bool(await _value(self._conn, _core.RELEASE_LEASE,
                                             (self.ns, self.id, self.token)))
        except Exception:
            if not was_lost:
                raise
        finally:
            await self._conn.close()
            if self._hung is not None:
                # The renewal cut off at the deadline, ended by the close (or given up on).
                await asyncio.wait([self._hung], timeout=1.0)
        return released

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.release()
        except ConnectionLost:
            if exc[0] is None:
                raise


async def try_acquire_lease(conninfo: str, ns: int, id: int, ttl: Duration, *,
                            owner: Optional[str] = None, wait: Optional[Duration] = None,
                            margin: Optional[Duration] = None,
                            on_lost: Optional[Callable[[str], None]] = None,
                            connect: Connect = _connect) -> Optional[AsyncLease]:
    """The lease on (ns, id) for `owner` (by default one made for this call), or None when
    another owner holds it (after waiting up to `wait`)."""
    clock = _core.LeaseClock(ttl, margin, time.monotonic())
    owner = owner or _core.new_owner()
    conn = await connect(conninfo)
    try:
        sent_at = time.monotonic()
        token = await _value(conn, *_core.acquire_lease_args(ns, id, owner, ttl, wait))
    except LockBusy:
        # The wait ran out (55P03): busy, as without a wait.
        await conn.close()
        return None
    except BaseException:
        await conn.close()
        raise
    if token is None:
        await conn.close()
        return None
    clock.renewed(sent_at)
    return AsyncLease(conn, ns, id, owner, token, clock, on_lost)


async def acquire_lease(conninfo: str, ns: int, id: int, ttl: Duration,
                        **options: Any) -> AsyncLease:
    """As try_acquire_lease, but LockBusy instead of None."""
    lease = await try_acquire_lease(conninfo, ns, id, ttl, **options)
    if lease is None:
        raise LockBusy(f"the lease on ({ns}, {id}) is held by another owner")
    return lease


class AsyncLeaderElection:
    """The asyncio form of LeaderElection: `run()` campaigns until `stop` is set; each term
    runs `await on_elected(term, lost)` as a task, cancelled if it has not returned when the
    term ends, then `on_stopped()`."""

    def __init__(self, conninfo: str, ns: int, id: int, *, ttl: Duration = 15.0,
                 owner: Optional[str] = None, retry_period: Optional[Duration] = None,
                 margin: Optional[Duration] = None, connect: Connect = _connect) -> None:
        self.conninfo, self.ns, self.id = conninfo, ns, id
        self.ttl, self.margin, self.connect = ttl, margin, connect
        self.owner = owner or _core.new_owner()
        self.retry_period = retry_period if retry_period is not None else _core.seconds(ttl) / 2

    async def run(self, on_elected: Callable[[int, asyncio.Event], Awaitable[None]],
                  on_stopped: Optional[Callable[[], None]] = None, *,
                  stop: Optional[asyncio.Event] = None) -> None:
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                lease = await try_acquire_lease(self.conninfo, self.ns, self.id, self.ttl,
                                                owner=self.owner, wait=self.retry_period,
                                                margin=self.margin, connect=self.connect)
            except (ConnectionLost, psycopg.OperationalError):
                try:
                    await asyncio.wait_for(stop.wait(), _core.seconds(self.retry_period))
                except asyncio.TimeoutError:
                    pass
                continue
            if lease is None:
                continue
            await self._lead(lease, on_elected, stop)
            if on_stopped is not None:
                on_stopped()

    async def _lead(self, lease: AsyncLease,
                    on_elected: Callable[[int, asyncio.Event], Awaitable[None]],
                    stop: asyncio.Event) -> None:
        work = asyncio.ensure_future(on_elected(lease.token, lease.lost))
        ended = [asyncio.ensure_future(lease.lost.wait()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait([work, *ended], return_when=asyncio.FIRST_COMPLETED)
        for waiter in ended:
            waiter.cancel()
        try:
            await lease.release()
        except ConnectionLost:
            pass
        if not work.done():
            work.cancel()
        try:
            await work
        except asyncio.CancelledError:
            pass
