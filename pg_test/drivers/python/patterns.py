"""The driver suite's patterns, run by psycopg 3 (sync), asyncpg, and SQLAlchemy 2 over each,
each sending parameters the way the driver does by default (asyncpg: untyped; psycopg: ints
typed by size, strings untyped; SQLAlchemy's text(): as its driver does), directly and through
PgBouncer in transaction mode; and the mixed workload through PgBouncer (mixed.py).

    python patterns.py DRIVER ROUTE              (ROUTE: direct | pooled)
    python patterns.py DRIVER mixed SETTINGS N   (SETTINGS: documented | defaults; N: process)

DRIVER is psycopg | asyncpg | sqlalchemy-psycopg | sqlalchemy-asyncpg. Connection details come
from the environment (run.sh sets them). Prints one line per pattern, "<driver> <route>
<pattern>: ok" or "... FAILED: why", and exits 1 if any failed.
"""

import asyncio
import datetime
import json
import os
import sys
import threading
import time
import uuid

import mixed

driver, route = sys.argv[1], sys.argv[2]
POOLED = route in ("pooled", "mixed")
HOST = os.environ["DRIVERS_POOLED_HOST" if POOLED else "DRIVERS_HOST"]
PORT = int(os.environ["DRIVERS_POOLED_PORT" if POOLED else "DRIVERS_PORT"])
DATABASE = os.environ["DRIVERS_DATABASE"]
# Behind the pooler, the README's setting turns the driver's prepared statements off; the
# mixed workload's control ("defaults") keeps the driver's defaults to show what it prevents.
DOCUMENTED = route == "pooled" or (route == "mixed" and sys.argv[3] == "documented")
# Keys and rows of their own for each driver and route, so runs cannot meet.
DRIVERS = ["psycopg", "asyncpg", "sqlalchemy-psycopg", "sqlalchemy-asyncpg"]
BASE = {"psycopg": 0, "asyncpg": 200, "sqlalchemy-psycopg": 800,
        "sqlalchemy-asyncpg": 1000}[driver] + (100 if route == "pooled" else 0)


class Psycopg:
    """psycopg 3, autocommit connections with explicit BEGIN/COMMIT (as the other drivers)."""

    def __init__(self):
        import psycopg
        self.errors = psycopg.Error
        prepare = {"prepare_threshold": None} if DOCUMENTED else {}
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

    def autocommit(self):
        return self

    @staticmethod
    def row_id(value):
        return value


class Asyncpg:
    """asyncpg: parameters untyped, types inferred by the server; run synchronously here."""

    def __init__(self):
        import asyncpg
        self.errors = asyncpg.PostgresError
        self.loop = asyncio.new_event_loop()
        cache = {"statement_cache_size": 0} if DOCUMENTED else {}
        self.conn = self.loop.run_until_complete(
            asyncpg.connect(host=HOST, port=PORT, database=DATABASE, user="postgres", **cache))

    def one(self, sql, *params):
        return self.loop.run_until_complete(self.conn.fetchval(sql, *params))

    def sqlstate(self, error):
        return error.sqlstate

    def close(self):
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()

    def autocommit(self):
        return self

    @staticmethod
    def row_id(value):
        # fenced_update's untyped id resolves to text: asyncpg wants a str there.
        return str(value)


class SQLAlchemy:
    """SQLAlchemy 2 Core with text() statements, over psycopg 3 or, through its asyncio engine,
    asyncpg. As SQLAlchemy users do, BEGIN/COMMIT/ROLLBACK are the connection's begin(),
    commit() and rollback(), and a statement outside them runs in a transaction of its own:
    behind a transaction pooler the asyncpg dialect's prepare and execute, two round trips,
    must share one server connection."""

    def __init__(self, isolation_level=None):
        import sqlalchemy
        from sqlalchemy.ext.asyncio import create_async_engine
        self.text = sqlalchemy.text
        self.errors = sqlalchemy.exc.DBAPIError
        self.over_asyncpg = driver == "sqlalchemy-asyncpg"
        self.isolation_level = isolation_level
        url = f"postgresql+{'asyncpg' if self.over_asyncpg else 'psycopg'}://postgres@/{DATABASE}"
        if self.over_asyncpg:
            # asyncpg takes the socket directory and port as host and port.
            cache, names = "", {}
            if DOCUMENTED:
                # The dialect prepares every statement, by a name from a per-connection
                # counter unless told otherwise: unique names, and no caches.
                cache = "&prepared_statement_cache_size=0"
                names = {"statement_cache_size": 0,
                         "prepared_statement_name_func": lambda: f"__asyncpg_{uuid.uuid4()}__"}
            self.loop = asyncio.new_event_loop()
            self.engine = create_async_engine(f"{url}?host={HOST}&port={PORT}{cache}",
                                              connect_args=names)
            self.conn = self.loop.run_until_complete(self._connect())
        else:
            prepare = {"prepare_threshold": None} if DOCUMENTED else {}
            self.engine = sqlalchemy.create_engine(f"{url}?host={HOST}&port={PORT}",
                                                   connect_args=prepare)
            self.conn = self.engine.connect()
            if isolation_level:
                self.conn = self.conn.execution_options(isolation_level=isolation_level)
        self.in_transaction = False

    async def _connect(self):
        conn = await self.engine.connect()
        if self.isolation_level:
            conn = await conn.execution_options(isolation_level=self.isolation_level)
        return conn

    def _run(self, call):
        return self.loop.run_until_complete(call) if self.over_asyncpg else call

    def one(self, sql, *params):
        if sql in ("BEGIN", "COMMIT", "ROLLBACK"):
            self.in_transaction = sql == "BEGIN"
            method = {"BEGIN": "begin", "COMMIT": "commit", "ROLLBACK": "rollback"}[sql]
            self._run(getattr(self.conn, method)())
            return None
        # text() takes :name placeholders; the SQL is written with $n for every driver.
        for n in range(len(params), 0, -1):
            sql = sql.replace(f"${n}", f":p{n}")
        bound = {f"p{n}": value for n, value in enumerate(params, 1)}
        try:
            result = self._run(self.conn.execute(self.text(sql), bound))
            value = result.scalar() if result.returns_rows else None
        finally:
            if not self.in_transaction and not self.isolation_level:
                self._run(self.conn.rollback() if sys.exc_info()[0] else self.conn.commit())
        return value

    def autocommit(self):
        """The same driver on a connection in AUTOCOMMIT: statements outside any transaction."""
        return SQLAlchemy("AUTOCOMMIT")

    def sqlstate(self, error):
        return error.orig.sqlstate

    def close(self):
        self._run(self.conn.close())
        self._run(self.engine.dispose())
        if self.over_asyncpg:
            self.loop.close()

    def row_id(self, value):
        return str(value) if self.over_asyncpg else value


def connect():
    return {"psycopg": Psycopg, "asyncpg": Asyncpg}.get(driver, SQLAlchemy)()


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
    written = a.one("SELECT fenced_update_or_false($1, $2, $3, $4)", "driver_rows", a.row_id(BASE + 1),
                    token, changes)
    a.one("COMMIT")
    assert type(token) is int and token > 0, f"token {token!r} is not a positive int"
    assert written is True, f"fenced_update returned {written!r}"
    stale = a.one("SELECT fenced_update_or_false($1, $2, $3, $4)", "driver_rows", a.row_id(BASE + 1),
                  token - 1, changes)
    assert stale is False, f"a lower token wrote: {stale!r}"
    state = sqlstate_of(a, "SELECT fenced_update($1, $2, $3, $4)", "driver_rows",
                        a.row_id(BASE + 1), token - 1, changes)
    assert state == "SF001", f"fenced_update_strict with a lower token: SQLSTATE {state}"


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
    a.one("SELECT fence_check($1, $2)", resource, newer)
    state = sqlstate_of(a, "SELECT fence_check($1, $2)", resource, older)
    assert state == "SF001", f"SQLSTATE {state}"


def named_and_bigint(a, b):
    big = 5_000_000_000 + BASE
    a.one("BEGIN")
    named = a.one("SELECT acquire_fenced_named($1, $2)", "drivers", f"order:{BASE}")
    by_bigint = a.one("SELECT acquire_fenced_named($1, CAST($2 AS bigint)::text)", "drivers", big)
    by_text = a.one("SELECT acquire_fenced_named($1, $2)", "drivers", str(big))
    a.one("COMMIT")
    assert by_bigint == by_text, "a bigint key and its text are different locks"
    assert named != by_bigint, "two keys shared a grant"


def many_keys(a, b):
    # Two keys in one call, listed in either order: one token; the other client, asking for an
    # overlapping set without waiting, gets NULL and holds nothing.
    a.one("BEGIN")
    token = a.one("SELECT acquire_fenced_all($1, $2)", 4201, [BASE + 11, BASE + 10])
    b.one("BEGIN")
    busy = b.one("SELECT try_acquire_fenced_all($1, $2)", 4201, [BASE + 12, BASE + 11])
    b.one("ROLLBACK")
    named = a.one("SELECT acquire_fenced_all_named($1, $2)", "drivers",
                  [f"from:{BASE}", f"to:{BASE}"])
    a.one("COMMIT")
    assert type(token) is int and token > 0, f"token {token!r}"
    assert busy is None, f"an overlapping set was taken: {busy!r}"
    assert type(named) is int and named > token, f"named keys gave {named!r}"


def autocommit(a, b):
    outside = a.autocommit()
    state = sqlstate_of(outside, "SELECT acquire_fenced($1, $2)", 4201, BASE + 5)
    if outside is not a:
        outside.close()
    assert state == "25P01", f"SQLSTATE {state}"


def session_lease(a, b):
    token = a.one("SELECT acquire_fenced_session($1, $2)", 4201, BASE + 6)
    held = a.one("SELECT current_fence($1, $2)", 4201, BASE + 6)
    released = a.one("SELECT release_fenced($1, $2)", 4201, BASE + 6)
    assert held == token and released is True, f"held {held!r}, released {released!r}"


def lease(a, b):
    # Table-backed leases: every call commits on its own, so they work through the pooler.
    key, ttl = BASE + 7, datetime.timedelta(seconds=30)
    token = a.one("SELECT try_acquire_lease($1, $2, $3, $4)", 4203, key, "a", ttl)
    busy = b.one("SELECT try_acquire_lease($1, $2, $3, $4)", 4203, key, "b", ttl)
    expiry = a.one("SELECT renew_lease($1, $2, $3, $4)", 4203, key, token, ttl)
    released = a.one("SELECT release_lease($1, $2, $3)", 4203, key, token)
    taken = b.one("SELECT try_acquire_lease($1, $2, $3, $4)", 4203, key, "b", ttl)
    b.one("SELECT release_lease($1, $2, $3)", 4203, key, taken)
    assert type(token) is int and token > 0, f"token {token!r}"
    assert busy is None, f"another owner got {busy!r}"
    assert isinstance(expiry, datetime.datetime), f"renew returned {expiry!r}"
    assert released is True and taken > token, f"released {released!r}, next token {taken!r}"


def lease_wait(a, b):
    # A waiting acquire sleeps until a release wakes it: the holder's lease (1 hour) would
    # not expire within the wait (60 s), so a token here means the release woke the waiter.
    key = BASE + 8
    token = a.one("SELECT try_acquire_lease($1, $2, $3, $4)", 4203, key, "a",
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


def permits(a, b):
    # A fenced semaphore of one permit: a slot and a token as a row; the other client's try
    # gets no row (count 0), never a NULL row; after the holder's commit, a larger token.
    key = BASE + 13
    a.one("BEGIN")
    slot = a.one("SELECT slot FROM acquire_permit($1, $2, $3)", 4206, key, 1)
    token = a.one("SELECT token FROM acquire_permit($1, $2, $3)", 4206, key, 1)
    b.one("BEGIN")
    none = b.one("SELECT count(*) FROM try_acquire_permit($1, $2, $3)", 4206, key, 1)
    b.one("ROLLBACK")
    a.one("COMMIT")
    b.one("BEGIN")
    later = b.one("SELECT token FROM try_acquire_permit($1, $2, $3)", 4206, key, 1)
    b.one("COMMIT")
    assert slot == 1 and type(token) is int and token > 0, f"slot {slot!r}, token {token!r}"
    assert none == 0, f"a second holder of one permit: {none!r} rows"
    assert type(later) is int and later > token, f"next token {later!r}"


def lease_permit(a, b):
    # A permit as a lease: every call commits on its own, so it works through the pooler.
    key, ttl = BASE + 14, datetime.timedelta(seconds=30)
    token = a.one("SELECT token FROM try_acquire_lease_permit($1, $2, $3, $4, $5)", 4206, key, 1,
                  "a", ttl)
    none = b.one("SELECT count(*) FROM try_acquire_lease_permit($1, $2, $3, $4, $5)", 4206, key, 1,
                 "b", ttl)
    expiry = a.one("SELECT renew_lease($1, $2, $3, $4)", 4206, key, token, ttl)
    released = a.one("SELECT release_lease($1, $2, $3)", 4206, key, token)
    taken = b.one("SELECT token FROM acquire_lease_permit($1, $2, $3, $4, $5, $6)", 4206, key, 1,
                  "b", ttl, datetime.timedelta(seconds=5))
    b.one("SELECT release_lease($1, $2, $3)", 4206, key, taken)
    assert type(token) is int and token > 0, f"token {token!r}"
    assert none == 0, f"another owner got a permit: {none!r} rows"
    assert isinstance(expiry, datetime.datetime), f"renew returned {expiry!r}"
    assert released is True and taken > token, f"released {released!r}, next token {taken!r}"


def shared_lock(a, b):
    # Two readers at once, each with its own token; a writer's try is busy (NULL) meanwhile.
    key = BASE + 15
    a.one("BEGIN")
    b.one("BEGIN")
    first = a.one("SELECT acquire_fenced($1, $2, shared => true)", 4206, key)
    second = b.one("SELECT try_acquire_fenced($1, $2, shared => true)", 4206, key)
    b.one("ROLLBACK")
    b.one("BEGIN")
    busy = b.one("SELECT try_acquire_fenced($1, $2)", 4206, key)
    b.one("ROLLBACK")
    a.one("COMMIT")
    assert type(first) is int and type(second) is int and second > first, \
        f"readers' tokens {first!r}, {second!r}"
    assert busy is None, f"a writer got {busy!r} beside a reader"


def leader_owner(a, b):
    # Two clients, each with its owner: the second never gets the first's term, whichever
    # server connection the pooler gives it (0.1.0 returned the held term on a shared one).
    key = BASE + 9
    term = a.one("SELECT try_acquire_fenced_session($1, $2, $3)", 4203, key, "client-a")
    other = b.one("SELECT try_acquire_fenced_session($1, $2, $3)", 4203, key, "client-b")
    assert type(term) is int and term > 0, f"term {term!r}"
    assert other is None, f"a second owner became leader with term {other!r}"
    if route == "direct":
        released = a.one("SELECT release_fenced($1, $2, $3)", 4203, key, "client-a")
        assert released is True, f"released {released!r}"


def run_patterns():
    patterns = [guarded_write, skip_if_busy, bounded_wait, stale_write, named_and_bigint,
                many_keys, autocommit, lease, lease_wait, leader_owner, permits, lease_permit,
                shared_lock]
    # Session-scoped locks belong to one server connection: not through a transaction pooler.
    if route == "direct":
        patterns.append(session_lease)
    a, b = connect(), connect()
    failed = 0
    for pattern in patterns:
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
    return failed == 0


if route == "mixed":
    ok = mixed.run(driver, sys.argv[3], int(sys.argv[4]), connect)
else:
    ok = run_patterns()
sys.exit(0 if ok else 1)
