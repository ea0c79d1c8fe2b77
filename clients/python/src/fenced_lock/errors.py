"""Typed errors, one per SQLSTATE a caller acts on differently (the README's error table)."""

import re
from contextlib import contextmanager
from typing import Iterator, Optional

import psycopg


class FencedLockError(Exception):
    """The base of this library's errors. For one the server raised: its `sqlstate`, `detail`
    and `hint`, and the driver's error as `__cause__`."""

    def __init__(self, message: str, *, sqlstate: Optional[str] = None,
                 detail: Optional[str] = None, hint: Optional[str] = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint


class StaleToken(FencedLockError):
    """SF001: a write carried a token lower than one the resource already accepted. Stop the
    work; acquire again for a new token. `offered` (None for a NULL token) and `accepted`."""

    offered: Optional[int] = None
    accepted: Optional[int] = None
    resource: Optional[str] = None


class LockBusy(FencedLockError):
    """55P03, or a lease another owner holds after the wait asked for: nothing was taken."""


class NotInTransaction(FencedLockError):
    """25P01: a transaction-scoped lock asked for outside a transaction (it would end with the
    statement)."""


class Retryable(FencedLockError):
    """40001 (serialization failure) or 40P01 (deadlock): roll back and retry the transaction."""


class ReadOnly(FencedLockError):
    """25006: a read-only transaction or a hot standby, where no token can be drawn."""


class ConnectionLost(FencedLockError):
    """The connection broke (SQLSTATE class 08, the server shutting down or the backend
    terminated, or no SQLSTATE at all): any lock held on it is lost."""


class LeaseLost(FencedLockError):
    """Raised by `Lease.check()` once the lease is lost: `reason` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the lease is lost: {reason}")
        self.reason = reason


_BY_SQLSTATE = {
    "SF001": StaleToken,
    "55P03": LockBusy,
    "25P01": NotInTransaction,
    "40001": Retryable,
    "40P01": Retryable,
    "25006": ReadOnly,
    # admin_shutdown, crash_shutdown, cannot_connect_now: the session is gone.
    "57P01": ConnectionLost,
    "57P02": ConnectionLost,
    "57P03": ConnectionLost,
}

_STALE = re.compile(r"stale fencing token (NULL|-?\d+) for (.*): token (-?\d+) was already accepted")


def from_driver(error: psycopg.Error) -> Exception:
    """The typed error for a driver's error; the driver's error itself when no type fits."""
    sqlstate = error.sqlstate
    kind = _BY_SQLSTATE.get(sqlstate or "")
    if kind is None and (sqlstate or "").startswith("08"):
        kind = ConnectionLost
    if kind is None and sqlstate is None and isinstance(error, psycopg.OperationalError):
        kind = ConnectionLost
    if kind is None:
        return error
    diag = error.diag
    typed = kind(diag.message_primary or str(error), sqlstate=sqlstate,
                 detail=diag.message_detail, hint=diag.message_hint)
    if isinstance(typed, StaleToken):
        match = _STALE.search(str(typed))
        if match:
            typed.offered = None if match[1] == "NULL" else int(match[1])
            # "resource \"name\"" for a ledger's resource: the name alone.
            named = re.fullmatch(r'resource "(.*)"', match[2])
            typed.resource = named[1] if named else match[2]
            typed.accepted = int(match[3])
    return typed


@contextmanager
def translated() -> Iterator[None]:
    """Raises the typed error for a driver error raised inside."""
    try:
        yield
    except psycopg.Error as error:
        typed = from_driver(error)
        if typed is error:
            raise
        raise typed from error
