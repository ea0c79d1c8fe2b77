"""The lock systems under comparison, each used as its users run it, behind one interface:
`acquire(key)` tries once and returns a Grant (with the system's token, or None where it has
none) or None when the key is busy; `release` lets go; `renew`, on the systems whose lock is
a lease, extends it by the TTL and says whether it was still held. Any call may raise when the
lock service is gone: the worker then starts over with a new client. `check` says how the resource treats
the system's writes: "fenced_update", "guarded" (the seeds' `UPDATE ... WHERE fence < token`,
with `<=` so that a holder's write passes its own claim) or None (no token: every write is
accepted, as such a resource does in real life)."""

import base64
import json
import random
import sys
import time
import uuid

import psycopg2
import redis
from etcd3gw.client import Etcd3Client
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel
from etcd3gw.exceptions import ConnectionFailedError, ConnectionTimeoutError
from pottery import ExtendUnlockedLock, QuorumIsImpossible, QuorumNotAchieved, Redlock

# Leases are scaled down from the seconds users configure to 1 s, so that a trial lasts
# seconds; every system gets the same TTL.
TTL_MS = 1000
NAMESPACE = 8001


class Endpoints:
    """How a worker reaches the services: the JSON the harness passes it, as attributes."""

    def __init__(self, text):
        self.__dict__.update(json.loads(text))


class Grant:
    """A lock held: its key, the system's token (None without one), the client's handle; for
    a careful client, until when it may still act on it (CLOCK_MONOTONIC seconds, from the
    start of the acquire or of the last renewal that held) and whether a renewal found it
    lost."""

    def __init__(self, key, token, handle=None, asked_at=None):
        self.key, self.token, self.handle = key, token, handle
        self.lost = False
        self.valid_until = None if asked_at is None else asked_at + validity_s()


def validity_s():
    """How long a lease may be acted on from the moment it was asked for: its TTL less the
    clock drift that Redlock's specification allows for (1% of the TTL and 2 ms)."""
    return TTL_MS / 1000 * 0.99 - 0.002


class RedisLock:
    """One Redis, `SET key value NX PX ttl`, released by a Lua compare-and-delete and renewed
    by a compare-and-PEXPIRE (the patterns of Redis' own documentation), with redis-py's
    defaults; in the failover trials, the primary that the Sentinels name (redis-py's
    Sentinel client)."""

    name, check, family = "Redis (single)", None, "redis"
    # Stops before the write when a renewal found the lock lost or its validity ran out, as
    # the lock's documentation asks of its users (the careless client writes anyway).
    careful = False
    # The services' entry this client connects to.
    endpoint = "redis"
    RELEASE = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
               "return redis.call('del', KEYS[1]) else return 0 end")
    RENEW = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
             "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end")

    def __init__(self, services):
        if hasattr(services, "sentinels"):
            self.client = Sentinel(services.sentinels).master_for(services.service)
        else:
            self.client = redis.Redis(**getattr(services, self.endpoint))
        self.release_script = self.client.register_script(self.RELEASE)
        self.renew_script = self.client.register_script(self.RENEW)

    def acquire(self, key):
        value, asked_at = uuid.uuid4().hex, time.monotonic()
        if self.client.set(f"lock:{key}", value, nx=True, px=TTL_MS):
            return Grant(key, None, value, asked_at)
        return None

    def release(self, grant):
        self.release_script(keys=[f"lock:{grant.key}"], args=[grant.handle])

    def renew(self, grant):
        return self.renew_script(keys=[f"lock:{grant.key}"], args=[grant.handle, TTL_MS]) == 1


class RedisCareful(RedisLock):
    """The single Redis with a careful client: no write once a renewal found the lock lost or
    the validity (TTL less drift, from the last renewal that held) ran out."""

    name, careful = "Redis (single), careful client", True


class RedisAof(RedisLock):
    """The single Redis with persistence: AOF, `appendfsync everysec`."""

    name, endpoint = "Redis (single), AOF everysec", "redis_aof"


class RedisWait(RedisLock):
    """Redis behind Sentinels, each `SET` followed by `WAIT 1 1000`: a lock counts as taken
    only once the replica has acknowledged it (released and not taken otherwise)."""

    name = "Redis + WAIT 1 (Sentinel failover)"

    def acquire(self, key):
        grant = super().acquire(key)
        if grant is not None and self.client.wait(1, 1000) < 1:
            self.release(grant)
            return None
        return grant


class ByHand:
    """The seeds' PostgreSQL recipe: `pg_try_advisory_lock` on a session, a token from
    `nextval` of a CACHE 1 sequence, the resource's guarded UPDATE."""

    name, check, family, careful = "PostgreSQL by hand", "guarded", "postgres", False

    def __init__(self, services):
        self.conn = psycopg2.connect(services.lock_dsn)
        self.conn.autocommit = True

    def acquire(self, key):
        with self.conn.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", (NAMESPACE, key))
            if not cursor.fetchone()[0]:
                return None
            cursor.execute("SELECT nextval('by_hand_fence')")
            return Grant(key, cursor.fetchone()[0])

    def release(self, grant):
        with self.conn.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", (NAMESPACE, grant.key))


class ByHandOneStatement(ByHand):
    """The by-hand recipe in one statement: `pg_try_advisory_lock` and `nextval` in one
    `SELECT` (the throughput row only)."""

    name = "PostgreSQL by hand, one statement"

    def acquire(self, key):
        with self.conn.cursor() as cursor:
            cursor.execute("SELECT CASE WHEN pg_try_advisory_lock(%s, %s) "
                           "THEN nextval('by_hand_fence') END", (NAMESPACE, key))
            token = cursor.fetchone()[0]
        return None if token is None else Grant(key, token)


class FencedTransaction:
    """fenced_lock's transaction-scoped lock: `BEGIN; try_acquire_fenced(ns, key)`, the work,
    the resource's fenced_update, `COMMIT`."""

    name, check, family, careful = "fenced_lock (transaction)", "fenced_update", "postgres", False

    def __init__(self, services):
        self.conn = psycopg2.connect(services.lock_dsn)

    def acquire(self, key):
        with self.conn.cursor() as cursor:
            cursor.execute("SELECT try_acquire_fenced(%s, %s)", (NAMESPACE, key))
            token = cursor.fetchone()[0]
        if token is None:
            self.conn.rollback()
            return None
        return Grant(key, token)

    def release(self, grant):
        self.conn.commit()


class FencedControl(FencedTransaction):
    """The control of the asynchronous failover: fenced_lock's transaction lock on servers
    with `fenced_lock.failover_skip = 0` and `fenced_lock.token_block = 1` (a bare sequence,
    as by hand), which must repeat tokens there."""

    name = "fenced_lock, no failover skip (control)"
    SETTINGS = ("fenced_lock.failover_skip=0", "fenced_lock.token_block=1")


class OneCallLock:
    """A lock taken and released with one SQL call each, in autocommit, for an owner of this
    client's own: `ACQUIRE` returns the token (NULL when busy); both are formatted with the
    namespace, key, owner, TTL (s) and token."""

    family, careful = "postgres", False

    def __init__(self, services):
        self.conn = psycopg2.connect(services.lock_dsn)
        self.conn.autocommit = True
        self.owner = uuid.uuid4().hex
        self.server_time = None

    def call(self, sql, key, token=None):
        """The call's answer; a second column, where the SQL has one, is the lock server's
        clock as the call ran (`server_time`, for the history)."""
        with self.conn.cursor() as cursor:
            cursor.execute(sql, {"ns": NAMESPACE, "key": key, "owner": self.owner,
                                 "ttl": TTL_MS / 1000, "token": token})
            row = cursor.fetchone()
        if len(row) > 1:
            self.server_time = row[1]
        return row[0]

    def acquire(self, key):
        token = self.call(self.ACQUIRE, key)
        return None if token is None else Grant(key, token)

    def release(self, grant):
        self.call(self.RELEASE, grant.key, grant.token)


class FencedLease(OneCallLock):
    """fenced_lock's lease: `try_acquire_lease(ns, key, owner, ttl)`, `renew_lease`, the
    resource's fenced_update, `release_lease`."""

    name, check = "fenced_lock (lease)", "fenced_update"
    # The database's clock (microseconds since the epoch), on which the lease's expiry is.
    SERVER_TIME = ", (extract(epoch FROM clock_timestamp()) * 1e6)::bigint"
    ACQUIRE = ("SELECT try_acquire_lease(%(ns)s, %(key)s, %(owner)s, "
               "make_interval(secs => %(ttl)s))" + SERVER_TIME)
    RENEW = ("SELECT renew_lease(%(ns)s, %(key)s, %(token)s, make_interval(secs => %(ttl)s)) "
             "IS NOT NULL" + SERVER_TIME)
    RELEASE = "SELECT release_lease(%(ns)s, %(key)s, %(token)s)"

    def renew(self, grant):
        return self.call(self.RENEW, grant.key, grant.token)


class FencedLeaseUnflushed(FencedLease):
    """The lease on a connection with `synchronous_commit = off` (the README's opt-in: its
    commits do not wait for the WAL flush; tokens stay durable): the throughput row only."""

    name = "fenced_lock (lease), synchronous_commit off"

    def __init__(self, services):
        super().__init__(services)
        with self.conn.cursor() as cursor:
            cursor.execute("SET synchronous_commit = off")


class FencedLeader(OneCallLock):
    """fenced_lock's session lock for leader election: `try_acquire_fenced_session(ns, key, owner)` on a
    dedicated connection (the term is the token), `release_fenced`."""

    name, check = "fenced_lock (leader)", "fenced_update"
    ACQUIRE = "SELECT try_acquire_fenced_session(%(ns)s, %(key)s, %(owner)s)"
    RELEASE = "SELECT release_fenced(%(ns)s, %(key)s, %(owner)s)"


class RedlockLock:
    """Redlock over five independent Redis instances, through pottery (a maintained client),
    with its defaults, `auto_release_time` = the TTL and no limit to the extensions (pottery
    allows 3 by default). No token. The Redis clients do not retry and give up on a node after
    0.5 s: with redis-py's default retries, one acquire with a node down outlasts the whole
    TTL."""

    name, check, family, careful = "Redlock (5 nodes)", None, "redlock", False

    def __init__(self, services):
        self.masters = {redis.Redis(**node, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
                        for node in services.redlock}

    def acquire(self, key):
        lock = Redlock(key=f"compare-{key}", masters=self.masters,
                       auto_release_time=TTL_MS / 1000, num_extensions=sys.maxsize)
        asked_at = time.monotonic()
        return Grant(key, None, lock, asked_at) if lock.acquire(blocking=False) else None

    def release(self, grant):
        grant.handle.release()

    def renew(self, grant):
        try:
            grant.handle.extend()
            return True
        except ExtendUnlockedLock:
            return False


class RedlockCareful(RedlockLock):
    """Redlock with a careful client (as for the single Redis)."""

    name, careful = "Redlock (5 nodes), careful client", True


class RedlockDelayed(RedlockLock):
    """Redlock whose restarted nodes stay down for a TTL first, as its specification
    prescribes for nodes without fsync'd persistence (the restart column only)."""

    name = "Redlock (5 nodes), delayed restart"


class EtcdLock:
    """etcd's lease lock through etcd3gw (the v3 API's gRPC gateway): a lease of the TTL (etcd
    grants at least 2 s) and, in one transaction, a key created under it only if absent, as
    etcd3gw's lock does; the token is the revision of that transaction's own response (the
    created key's create_revision), which the resource checks as it would a fencing token;
    renewed by a keep-alive of the lease; released by revoking the lease (its key goes with
    it). Each new client talks to one of the members, at random."""

    name, check, family, careful = "etcd (lease lock)", "guarded", "etcd", False

    def __init__(self, services):
        self.client = Etcd3Client(host=services.etcd_host,
                                  port=random.choice(services.etcd_ports), timeout=2)

    def acquire(self, key):
        lease = self.client.lease(max(1, TTL_MS // 1000))
        name = base64.b64encode(f"compare-{key}".encode()).decode()
        created = self.client.transaction({
            "compare": [{"key": name, "result": "EQUAL", "target": "CREATE",
                         "create_revision": 0}],
            "success": [{"request_put": {"key": name, "value": name, "lease": lease.id}}],
            "failure": []})
        if not created.get("succeeded"):
            lease.revoke()
            return None
        return Grant(key, int(created["header"]["revision"]), lease)

    def release(self, grant):
        grant.handle.revoke()

    def renew(self, grant):
        return grant.handle.refresh() > 0


SYSTEMS = {"redis": RedisLock, "redis-careful": RedisCareful, "redis-aof": RedisAof,
           "redis-wait": RedisWait, "redlock": RedlockLock, "redlock-careful": RedlockCareful,
           "redlock-delayed": RedlockDelayed, "etcd": EtcdLock, "by-hand": ByHand,
           "by-hand-one": ByHandOneStatement,
           "fenced-xact": FencedTransaction, "fenced-lease": FencedLease,
           "fenced-lease-unflushed": FencedLeaseUnflushed, "fenced-leader": FencedLeader,
           "fenced-control": FencedControl}
# The throughput row's systems (the variants that take and release a lock as their base does
# are left out, and WAIT needs a replica).
THROUGHPUT = ("redis", "redis-aof", "redlock", "etcd", "by-hand", "by-hand-one", "fenced-xact",
              "fenced-lease", "fenced-lease-unflushed", "fenced-leader")
# The rows every fault applies to (where it can); the variants run in their own columns.
BASE = ("redis", "redis-careful", "redlock", "redlock-careful", "etcd", "by-hand",
        "fenced-xact", "fenced-lease", "fenced-leader")
# fenced_lock as users run it (not its control): what its cells must never let through.
FENCED_LOCK = ("fenced-xact", "fenced-lease", "fenced-leader")
# The systems whose lock is a session's or a transaction's on the lock server (by hand,
# fenced_lock's transaction and leader locks): a dead client's lock lasts as long as the
# server keeps its connection.
CONNECTION_BOUND = ("by-hand", "fenced-xact", "fenced-leader")


def error_class(error):
    """"lost" when `error` says the lock service (or the resource's server) went away: no
    SQLSTATE (libpq's own), class 08, 57P0x, 25P03 (the server ended the session, as
    idle_in_transaction_session_timeout does), a Redis or etcd connection error or timeout,
    Redlock's quorum not reached or unreachable. Otherwise the error's own code (SQLSTATE, Redis' error
    word, the exception's name), which a cell counts."""
    if isinstance(error, psycopg2.Error):
        code = error.pgcode
        if code is None or code.startswith(("08", "57P0")) or code == "25P03":
            return "lost"
        return code
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError, ConnectionError,
                          QuorumNotAchieved, QuorumIsImpossible, ConnectionFailedError, ConnectionTimeoutError)):
        return "lost"
    if isinstance(error, redis.ResponseError):
        return str(error).split()[0] if str(error).split() else "ResponseError"
    return type(error).__name__
