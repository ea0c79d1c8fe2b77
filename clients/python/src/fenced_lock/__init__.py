"""Fenced locks and self-renewing leases on PostgreSQL's fenced_lock extension (psycopg 3).

Blocking API here; the same for asyncio in `fenced_lock.aio`."""

from ._blocking import (Lease, LeaderElection, acquire, acquire_lease, fence_check,
                        fenced_update, try_acquire, try_acquire_lease)
from .errors import (ConnectionLost, FencedLockError, LeaseLost, LockBusy, NotInTransaction,
                     ReadOnly, Retryable, StaleToken, from_driver)

__version__ = "0.4.0"
__all__ = [
    "ConnectionLost", "FencedLockError", "Lease", "LeaseLost", "LeaderElection", "LockBusy",
    "NotInTransaction", "ReadOnly", "Retryable", "StaleToken", "acquire", "acquire_lease",
    "fence_check", "fenced_update", "from_driver", "try_acquire", "try_acquire_lease",
]
