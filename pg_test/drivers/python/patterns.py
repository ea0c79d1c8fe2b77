"""The driver suite's patterns, run by psycopg 3 (sync) and asyncpg, each sending parameters
the way the driver does by default (asyncpg: untyped; psycopg: ints typed by size, strings
untyped), directly and through PgBouncer in transaction mode.

    python patterns.py DRIVER ROUTE   (DRIVER: psycopg | asyncpg; ROUTE: direct | pooled)

Connection details come from the environment (run.sh sets them). Prints one line per pattern,
"<driver> <route> <pattern>: ok" or "... FAILED: why", and exits 1 if any failed.
"""

import asyncio
import datetime
import json
import os
import sys
import threading
import time

driver, route = sys.argv[1], sys.argv[2]
HOST = os.environ["DRIVERS_POOLED_HOST" if route == "pooled" else "DRIVERS_HOST"]
PORT = int(os.environ["DRIVERS_POOLED_PORT" if route == "pooled" else "DRIVERS_PORT"])
DATABASE = os.environ["DRIVERS_DATABASE"]
# Keys and rows of their own for each driver and route, so runs cannot meet.
BASE = {("psycopg", "direct"): 0, ("psycopg", "pooled"): 100,
        ("asyncpg", "direct"): 200, ("asyncpg", "pooled"): 300}[(driver, route)]


class Psycopg:
    """psycopg 3, autocommit connections with explicit BEGIN/COMMIT (as the other drivers)."""

    def __init__(self):
        import psycopg
        self.errors = psycopg.Error
        # Behind a transaction-mode pooler, no server-side prepared statements.
        prepare = {"prepare_threshold": None} if route == "pooled" else {}
        self.conn = psycopg.connect(host=HOST, port=PORT, dbname=DATABASE, user="postgres",
                                    autocommit=True, **prepare)

    def one(self, sql, *params):
        # psycopg's placeholders are %s; the SQL is written with $n for every driver.
        for n in range(len(params), 0, -1):
            sql = sql.replace(f"${n}", "%s")
        cursor = self.conn.execute(sql, params)
        return cursor.fetchone()[0] if cursor.description else None

    def sqlstate(self, error):
        return error.sqlstate

    def close(self):
        self.conn.close()

    @staticmethod
    def row_id(value):
        return value


class Asyncpg:
    """asyncpg: parameters untyped, types inferred by the server; run synchronously here."""

    def __init__(self):
        import asyncpg
        self.errors = asyncpg.PostgresError
        self.loop = asyncio.new_event_loop()
        cache = {"statement_cache_size": 0} if route == "pooled" else {}
        self.conn = self.loop.run_until_complete(
            asyncpg.connect(host=HOST, port=PORT, database=DATABASE, user="postgres", **cache))

    def one(self, sql, *params):
        return self.loop.run_until_complete(self.conn.fetchval(sql, *params))

    def sqlstate(self, error):
        return error.sqlstate

    def close(self):
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()

    @staticmethod
    def row_id(value):
        # fenced_update's untyped id resolves to text: asyncpg wants a str there.
        return str(value)


def connect():
    return {"psycopg": Psycopg, "asyncpg": Asyncpg}[driver]()


def sqlstate_of(conn, sql, *params):
    try:
        conn.one(sql, *params)
    except conn.errors as error:
        return conn.sqlstate(error)
    return None


def guarded_write(a, b):
    a.one("BEGIN")
    token = a.one("SELECT acquire_fenced($1, $2)", 4201, BASE + 1)
    changes = json.dumps({"v": f"{driver} {route}"})
    written = a.one("SELECT fenced_update($1, $2, $3, $4)", "driver_rows", a.row_id(BASE + 1),
                    token, changes)
    a.one("COMMIT")
    assert type(token) is int and token > 0, f"token {token!r} is not a positive int"
    assert written is True, f"fenced_update returned {written!r}"
    stale = a.one("SELECT fenced_update($1, $2, $3, $4)", "driver_rows", a.row_id(BASE + 1),
                  token - 1, changes)
    assert stale is False, f"a lower token wrote: {stale!r}"


def skip_if_busy(a, b):
    a.one("BEGIN")
    a.one("SELECT acquire_fenced($1, $2)", 4201, BASE + 2)
    b.one("BEGIN")
    busy = b.one("SELECT try_acquire_fenced($1, $2)", 4201, BASE + 2)
    b.one("ROLLBACK")
    a.one("ROLLBACK")
    assert busy is None, f"try_acquire_fenced on a held key returned {busy!r}"


def bounded_wait(a, b):
    a.one("BEGIN")
    a.one("SELECT acquire_fenced($1, $2)", 4201, BASE + 2)
    b.one("BEGIN")
    state = sqlstate_of(b, "SELECT acquire_fenced($1, $2, $3)", 4201, BASE + 2,
                        datetime.timedelta(milliseconds=100))
    b.one("ROLLBACK")
    a.one("ROLLBACK")
    assert state == "55P03", f"SQLSTATE {state}"


def stale_write(a, b):
    a.one("BEGIN")
    older = a.one("SELECT acquire_fenced($1, $2)", 4201, BASE + 3)
    newer = a.one("SELECT acquire_fenced($1, $2)", 4201, BASE + 4)
    a.one("COMMIT")
    resource = f"drivers/{driver}/{route}"
    a.one("SELECT fence_check_strict($1, $2)", resource, newer)
    state = sqlstate_of(a, "SELECT fence_check_strict($1, $2)", resource, older)
    assert state == "SF001", f"SQLSTATE {state}"


def named_and_bigint(a, b):
    big = 5_000_000_000 + BASE
    a.one("BEGIN")
    named = a.one("SELECT acquire_fenced_named($1, $2)", "drivers", f"order:{BASE}")
    by_bigint = a.one("SELECT acquire_fenced_named_bigint($1, $2)", "drivers", big)
    by_text = a.one("SELECT acquire_fenced_named($1, $2)", "drivers", str(big))
    a.one("COMMIT")
    assert by_bigint == by_text, "a bigint key and its text are different locks"
    assert named != by_bigint, "two keys shared a grant"


def autocommit(a, b):
    state = sqlstate_of(a, "SELECT acquire_fenced($1, $2)", 4201, BASE + 5)
    assert state == "25P01", f"SQLSTATE {state}"


def session_lease(a, b):
    token = a.one("SELECT acquire_fenced_session($1, $2)", 4201, BASE + 6)
    held = a.one("SELECT current_fence($1, $2)", 4201, BASE + 6)
    released = a.one("SELECT release_fenced($1, $2)", 4201, BASE + 6)
    assert held == token and released is True, f"held {held!r}, released {released!r}"


def lease(a, b):
    # Table-backed leases: every call commits on its own, so they work through the pooler.
    key, ttl = BASE + 7, datetime.timedelta(seconds=30)
    token = a.one("SELECT acquire_lease($1, $2, $3, $4)", 4203, key, "a", ttl)
    busy = b.one("SELECT acquire_lease($1, $2, $3, $4)", 4203, key, "b", ttl)
    expiry = a.one("SELECT renew_lease($1, $2, $3, $4)", 4203, key, token, ttl)
    released = a.one("SELECT release_lease($1, $2, $3)", 4203, key, token)
    taken = b.one("SELECT acquire_lease($1, $2, $3, $4)", 4203, key, "b", ttl)
    b.one("SELECT release_lease($1, $2, $3)", 4203, key, taken)
    assert type(token) is int and token > 0, f"token {token!r}"
    assert busy is None, f"another owner got {busy!r}"
    assert isinstance(expiry, datetime.datetime), f"renew returned {expiry!r}"
    assert released is True and taken > token, f"released {released!r}, next token {taken!r}"


def lease_wait(a, b):
    # A waiting acquire sleeps until a release wakes it: the holder's lease (1 hour) would
    # not expire within the wait (60 s), so a token here means the release woke the waiter.
    key = BASE + 8
    token = a.one("SELECT acquire_lease($1, $2, $3, $4)", 4203, key, "a",
                  datetime.timedelta(hours=1))
    waited = {}

    def wait():
        waited["token"] = b.one("SELECT acquire_lease($1, $2, $3, $4, $5)", 4203, key, "b",
                                datetime.timedelta(minutes=1), datetime.timedelta(seconds=60))

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)  # let the waiter look and sleep (if not, it finds the lease free: fine)
    a.one("SELECT release_lease($1, $2, $3)", 4203, key, token)
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "the release did not wake the waiting acquire"
    assert waited.get("token") is not None and waited["token"] > token, f"waited {waited!r}"
    b.one("SELECT release_lease($1, $2, $3)", 4203, key, waited["token"])


def leader_owner(a, b):
    # Two clients, each with its owner: the second never gets the first's term, whichever
    # server connection the pooler gives it (0.1.0 returned the held term on a shared one).
    key = BASE + 9
    term = a.one("SELECT become_leader($1, $2, $3)", 4203, key, "client-a")
    other = b.one("SELECT become_leader($1, $2, $3)", 4203, key, "client-b")
    assert type(term) is int and term > 0, f"term {term!r}"
    assert other is None, f"a second owner became leader with term {other!r}"
    if route == "direct":
        released = a.one("SELECT release_fenced($1, $2, $3)", 4203, key, "client-a")
        assert released is True, f"released {released!r}"


PATTERNS = [guarded_write, skip_if_busy, bounded_wait, stale_write, named_and_bigint, autocommit,
            lease, lease_wait, leader_owner]
# Session-scoped locks belong to one server connection: not through a transaction pooler.
if route == "direct":
    PATTERNS.append(session_lease)

a, b = connect(), connect()
failed = 0
for pattern in PATTERNS:
    try:
        pattern(a, b)
        print(f"{driver} {route} {pattern.__name__}: ok")
    except Exception as error:  # noqa: BLE001 - any failure of the pattern is reported
        failed += 1
        print(f"{driver} {route} {pattern.__name__}: FAILED: {error!r}")
        for conn in (a, b):
            try:
                conn.one("ROLLBACK")
            except Exception:  # noqa: BLE001 - nothing to roll back
                pass
a.close()
b.close()
sys.exit(1 if failed else 0)
