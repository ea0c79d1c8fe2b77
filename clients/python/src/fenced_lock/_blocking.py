"""The blocking API: psycopg connections, and threads for the renewer and the watchdog."""

import threading
import time
from typing import Any, Callable, List, Mapping, Optional

import psycopg
from psycopg.pq import TransactionStatus

from . import _core
from ._core import Duration, Params
from .errors import ConnectionLost, LeaseLost, LockBusy, NotInTransaction, Retryable, translated

#: Opens a lease's own connection: `psycopg.connect(conninfo, autocommit=True,
#: prepare_threshold=None)` by default.
Connect = Callable[[str], psycopg.Connection]


def _value(conn: psycopg.Connection, query: str, params: Params) -> Any:
    with translated():
        row = conn.execute(query, params, prepare=False).fetchone()
    return row[0] if row else None


def _require_transaction(conn: psycopg.Connection) -> None:
    # Without autocommit psycopg opens the transaction itself with the next statement.
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise NotInTransaction(
            "a transaction-scoped lock needs a transaction: use `with conn.transaction():` "
            "(outside one the lock would end with the statement)", sqlstate="25P01")


def acquire(conn: psycopg.Connection, ns: int, id: int, *, timeout: Optional[Duration] = None,
            shared: bool = False) -> int:
    """Takes the transaction-scoped lock on (ns, id) inside the caller's transaction, waiting
    (at most `timeout`, then LockBusy), and returns its fencing token."""
    _require_transaction(conn)
    token = _core.token(_value(conn, *_core.acquire_args(ns, id, timeout, shared)))
    assert token is not None, "acquire_fenced returns a token or raises"
    return token


def try_acquire(conn: psycopg.Connection, ns: int, id: int, *, shared: bool = False
                ) -> Optional[int]:
    """The token, or None at once when another session holds (ns, id)."""
    _require_transaction(conn)
    return _core.token(_value(conn, _core.TRY_ACQUIRE[shared], (ns, id)))


def fenced_update(conn: psycopg.Connection, table: str, key: Any, token: int,
                  changes: Mapping[str, Any], *, key_column: str = "id",
                  fence_column: str = "fence") -> None:
    """Writes `changes` to the row `key` of `table` and its fence to `token`, unless the row
    accepted a larger token: then StaleToken, and nothing is written."""
    _value(conn, _core.FENCED_UPDATE,
           _core.fenced_update_args(table, key, token, changes, key_column, fence_column))


def fence_check(conn: psycopg.Connection, resource: str, token: int) -> None:
    """Records `token` as the highest `resource` accepted, or raises StaleToken."""
    _value(conn, _core.FENCE_CHECK, (resource, token))


def _connect(conninfo: str) -> psycopg.Connection:
    return psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)


class Lease:
    """A lease held for `owner`, renewed in the background every third of its ttl on a
    connection of its own, until `release()` (or the end of a `with` block).

    `lost` (a threading.Event) is set when the lease ends: released, or lost because a renewal
    found it no longer held, failed, or could not complete before its validity ended (less the
    margin); `on_lost(reason)` is called first, from the thread that noticed, only for a loss. A
    lease is never taken again behind the holder's back: once lost, it stays lost."""

    def __init__(self, conn: psycopg.Connection, ns: int, id: int, owner: str, token: int,
                 clock: _core.LeaseClock, on_lost: Optional[Callable[[str], None]]) -> None:
        self.ns, self.id, self.owner, self.token = ns, id, owner, token
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._conn, self._clock, self._on_lost = conn, clock, on_lost
        # One statement at a time on the connection; the state below changes under it too.
        self._using = threading.Lock()
        self._ending = threading.Lock()
        self._stop = threading.Event()
        self._broken = False
        self._threads = [
            threading.Thread(target=self._renew, name=f"fenced_lock renewer {ns}:{id}", daemon=True),
            threading.Thread(target=self._watch, name=f"fenced_lock watchdog {ns}:{id}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def valid_for(self) -> float:
        """Seconds the lease is still known to be valid (0 once lost)."""
        return 0.0 if self.lost_reason is not None else max(0.0, self._clock.remaining())

    def check(self) -> None:
        """Raises LeaseLost unless the lease is still known to be valid: call it before each
        step of the work (the clock is read here, so a holder paused past its validity finds
        out at once, even before the watchdog runs)."""
        if self.lost_reason is None and self._clock.remaining() <= 0:
            self._lose(_core.LOST_DEADLINE)
        if self.lost_reason is not None:
            raise LeaseLost(self.lost_reason)

    def _lose(self, reason: str, notify: bool = True) -> None:
        with self._ending:
            if self.lost_reason is not None:
                return
            self.lost_reason = reason
            self._stop.set()
        # The callback first: whoever the event wakes finds it has run.
        if notify and self._on_lost is not None:
            try:
                self._on_lost(reason)
            except Exception:  # noqa: BLE001 - the callback's failure must not stop the renewer
                pass
        self.lost.set()

    def _renew(self) -> None:
        ttl = _core.interval(self._clock.ttl)
        while not self._stop.wait(max(0.0, self._clock.next_renewal - time.monotonic())):
            sent_at = time.monotonic()
            if self._clock.remaining(sent_at) <= 0:
                return self._lose(_core.LOST_DEADLINE)
            try:
                with self._using:
                    expires = _value(self._conn, _core.RENEW_LEASE,
                                     (self.ns, self.id, self.token, ttl))
            except (LockBusy, Retryable):
                # Another transaction writing the row for a moment: try again while time remains.
                self._clock.failed(time.monotonic())
                continue
            except ConnectionLost as error:
                self._broken = True
                return self._lose(f"the connection was lost: {error}")
            except Exception as error:  # noqa: BLE001 - any other failure loses the lease
                return self._lose(f"renewal failed: {error}")
            if expires is None:
                return self._lose(_core.LOST_NOT_HELD)
            with self._ending:
                if self.lost_reason is None:
                    self._clock.renewed(sent_at)

    def _watch(self) -> None:
        # A renewal hung on a dead link never returns in time: this thread, not the renewer,
        # says so when the validity ends.
        while not self._stop.wait(max(0.0, self._clock.remaining())):
            if self._clock.remaining() <= 0:
                return self._lose(_core.LOST_DEADLINE)

    def release(self) -> bool:
        """Ends the lease: True when the server released it (it was still this holder's).
        `lost` is set (reason "released", no callback). After a loss it tries too, since a
        lease only known to be past its validity may still be this holder's."""
        was_lost = self.lost_reason is not None
        self._lose(_core.LOST_RELEASED, notify=False)
        released = False
        if self._broken:
            self._conn.close()
        # A renewal hung on a dead link holds the connection: give up waiting for it.
        elif self._using.acquire(timeout=max(1.0, self._clock.ttl / 3)):
            try:
                released = bool(_value(self._conn, _core.RELEASE_LEASE,
                                       (self.ns, self.id, self.token)))
            except Exception:
                if not was_lost:
                    raise
            finally:
                self._using.release()
                self._conn.close()
        return released

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        except ConnectionLost:
            # The lease expires by itself; the work's own error, if any, matters more.
            if exc[0] is None:
                raise


def try_acquire_lease(conninfo: str, ns: int, id: int, ttl: Duration, *,
                      owner: Optional[str] = None, wait: Optional[Duration] = None,
                      margin: Optional[Duration] = None,
                      on_lost: Optional[Callable[[str], None]] = None,
                      connect: Connect = _connect) -> Optional[Lease]:
    """The lease on (ns, id) for `owner` (by default one made for this call), or None when
    another owner holds it (after waiting up to `wait` for it to be released or expire). The
    lease's connection is opened with `connect(conninfo)`."""
    clock = _core.LeaseClock(ttl, margin, time.monotonic())
    owner = owner or _core.new_owner()
    conn = connect(conninfo)
    try:
        sent_at = time.monotonic()
        token = _value(conn, *_core.acquire_lease_args(ns, id, owner, ttl, wait))
    except LockBusy:
        # The wait ran out (55P03): busy, as without a wait.
        conn.close()
        return None
    except BaseException:
        conn.close()
        raise
    if token is None:
        conn.close()
        return None
    clock.renewed(sent_at)
    return Lease(conn, ns, id, owner, token, clock, on_lost)


def acquire_lease(conninfo: str, ns: int, id: int, ttl: Duration, **options: Any) -> Lease:
    """As try_acquire_lease, but LockBusy instead of None."""
    lease = try_acquire_lease(conninfo, ns, id, ttl, **options)
    if lease is None:
        raise LockBusy(f"the lease on ({ns}, {id}) is held by another owner")
    return lease


class LeaderElection:
    """client-go's leader election on a lease: `run()` campaigns for (ns, id) until `stop` is
    set; each time it wins, `on_elected(term, lost)` runs in a thread of its own (the term is
    the lease's token; `lost` is set when the term ends, and the function should return
    then), and `on_stopped()` once it has returned; then it campaigns again."""

    def __init__(self, conninfo: str, ns: int, id: int, *, ttl: Duration = 15.0,
                 owner: Optional[str] = None, retry_period: Optional[Duration] = None,
                 margin: Optional[Duration] = None, connect: Connect = _connect) -> None:
        self.conninfo, self.ns, self.id = conninfo, ns, id
        self.ttl, self.margin, self.connect = ttl, margin, connect
        self.owner = owner or _core.new_owner()
        self.retry_period = retry_period if retry_period is not None else _core.seconds(ttl) / 2

    def run(self, on_elected: Callable[[int, threading.Event], None],
            on_stopped: Optional[Callable[[], None]] = None, *,
            stop: Optional[threading.Event] = None) -> None:
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                lease = try_acquire_lease(self.conninfo, self.ns, self.id, self.ttl,
                                          owner=self.owner, wait=self.retry_period,
                                          margin=self.margin, connect=self.connect)
            except (ConnectionLost, psycopg.OperationalError):
                stop.wait(_core.seconds(self.retry_period))
                continue
            if lease is None:
                continue
            self._lead(lease, on_elected, stop)
            if on_stopped is not None:
                on_stopped()

    def _lead(self, lease: Lease, on_elected: Callable[[int, threading.Event], None],
              stop: threading.Event) -> None:
        failure: List[BaseException] = []

        def work() -> None:
            try:
                on_elected(lease.token, lease.lost)
            except BaseException as error:  # noqa: BLE001 - raised again from run()
                failure.append(error)

        worker = threading.Thread(target=work, name=f"fenced_lock leader {self.ns}:{self.id}")
        worker.start()
        while worker.is_alive() and not stop.is_set() and not lease.lost.wait(0.05):
            pass
        try:
            lease.release()
        except ConnectionLost:
            pass
        worker.join()
        if failure:
            raise failure[0]
