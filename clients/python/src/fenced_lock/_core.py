"""What the blocking and the asyncio APIs share: the statements they send, the owner ids they
make, and the lease's clock (when to renew, until when the lease is known to be valid)."""

import datetime
import json
import os
import socket
import time
import uuid
from typing import Any, Mapping, Optional, Tuple, Union

#: Seconds, or a timedelta.
Duration = Union[float, int, datetime.timedelta]
#: A statement's parameters.
Params = Tuple[Any, ...]

# Every parameter is cast to the type the function takes: a Python int is sent as int2, int4,
# int8 or numeric by its size, and an int8 would match no int4 overload. Statements are sent
# unprepared (`prepare=False`): behind a transaction-mode pooler, a named statement prepared on
# one server connection is missing on the next.
KEY = "%s::int4, %s::int4"
ACQUIRE = {
    (False, False): f"SELECT acquire_fenced({KEY})",
    (False, True): f"SELECT acquire_fenced({KEY}, %s::interval)",
    (True, False): f"SELECT acquire_fenced({KEY}, shared => true)",
    (True, True): f"SELECT acquire_fenced({KEY}, %s::interval, true)",
}
TRY_ACQUIRE = {
    False: f"SELECT try_acquire_fenced({KEY})",
    True: f"SELECT try_acquire_fenced({KEY}, true)",
}
ACQUIRE_LEASE = f"SELECT try_acquire_lease({KEY}, %s::text, %s::interval)"
ACQUIRE_LEASE_WAIT = f"SELECT acquire_lease({KEY}, %s::text, %s::interval, %s::interval)"
RENEW_LEASE = f"SELECT renew_lease({KEY}, %s::int8, %s::interval)"
RELEASE_LEASE = f"SELECT release_lease({KEY}, %s::int8)"
# The text forms: the key is read as the key column's type, whatever the Python value's type.
FENCED_UPDATE = ("SELECT fenced_update(%s::text, %s::text, %s::int8, %s::jsonb, "
                 "%s::text, %s::text)")
FENCE_CHECK = "SELECT fence_check(%s::text, %s::int8)"


def seconds(duration: Duration) -> float:
    if isinstance(duration, datetime.timedelta):
        return duration.total_seconds()
    return float(duration)


def interval(duration: Duration) -> datetime.timedelta:
    """What psycopg sends as an interval."""
    return datetime.timedelta(seconds=seconds(duration))


def new_owner() -> str:
    """An owner id no other holder has: host, process and a random part (under 256 bytes)."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


def acquire_args(ns: int, id: int, timeout: Optional[Duration], shared: bool
                 ) -> Tuple[str, Params]:
    if timeout is None:
        return ACQUIRE[shared, False], (ns, id)
    return ACQUIRE[shared, True], (ns, id, interval(timeout))


def acquire_lease_args(ns: int, id: int, owner: str, ttl: Duration,
                       wait: Optional[Duration]) -> Tuple[str, Params]:
    if wait is None:
        return ACQUIRE_LEASE, (ns, id, owner, interval(ttl))
    return ACQUIRE_LEASE_WAIT, (ns, id, owner, interval(ttl), interval(wait))


def fenced_update_args(table: str, key: Any, token: int, changes: Mapping[str, Any],
                       key_column: str, fence_column: str) -> Params:
    return (table, str(key), token, json.dumps(dict(changes)), key_column, fence_column)


def token(value: Any) -> Optional[int]:
    """A token column's value: None (busy) or the token."""
    return None if value is None else int(value)


class LeaseClock:
    """A lease's timing on this process's monotonic clock, never the wall clock. The server
    grants `ttl` from the moment it runs the call, which is after the call was sent, so the
    lease is known valid until the send time + ttl (less `margin`, for the clocks' rates and
    the time a write takes once the holder has checked). Renewals are due every third of the
    ttl; one that fails for a passing reason is tried again sooner, while time remains."""

    def __init__(self, ttl: Duration, margin: Optional[Duration], sent_at: float) -> None:
        self.ttl = seconds(ttl)
        if self.ttl <= 0:
            raise ValueError("ttl must be positive")
        self.margin = min(self.ttl / 5, 2.0) if margin is None else seconds(margin)
        if not 0 <= self.margin < self.ttl / 3:
            raise ValueError("margin must be at least 0 and below a third of the ttl")
        self.retry = min(self.ttl / 10, 1.0)
        self.renewed(sent_at)

    def renewed(self, sent_at: float) -> None:
        self.valid_until = sent_at + self.ttl
        self.next_renewal = sent_at + self.ttl / 3

    def failed(self, now: float) -> None:
        self.next_renewal = now + self.retry

    @property
    def deadline(self) -> float:
        """When the lease stops being known valid: no renewal may complete after it."""
        return self.valid_until - self.margin

    def remaining(self, now: Optional[float] = None) -> float:
        return self.deadline - (time.monotonic() if now is None else now)


# Why a lease was lost: the `reason` of LeaseLost and of the on_lost callback.
LOST_NOT_HELD = "renew_lease returned NULL: the lease was released or taken over"
LOST_DEADLINE = "no renewal completed before the lease's validity ended"
LOST_RELEASED = "released"
