"""The lock systems under comparison, each used as its users run it, behind one interface:
`acquire(key)` tries once and returns a Grant (with the system's token, or None where it has
none) or None when the key is busy; `release` lets go; `renew`, on the systems whose lock is
a lease, extends it by the TTL and says whether it was still held. Any call may raise when the
lock service is gone: the worker then starts over with a new client. `check` says how the resource treats
the system's writes: "fenced_update", "guarded" (the seeds' `UPDATE ... WHERE fence < token`,
with `<=` so that a holder's write passes its own claim) or None (no token: every write is
accepted, as such a resource does in real life)."""

import json
import random
import sys
import uuid

import psycopg2
import redis
from etcd3gw.client import Etcd3Client
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel
from pottery import ExtendUnlockedLock, Redlock

# Leases are scaled down from the seconds users configure to 1 s, so that a trial lasts
# seconds; every system gets the same TTL.
TTL_MS = 1000
NAMESPACE = 8001


class Endpoints:
    """How a worker reaches the services: the JSON the harness passes it, as attributes."""

    def __init__(self, text):
        self.__dict__.update(json.loads(text))


class Grant:
    def __init__(self, key, token, handle=None):
        self.key, self.token, self.handle = key, token, handle


class RedisLock:
    """One Redis, `SET key value NX PX ttl`, released by a Lua compare-and-delete and renewed
    by a compare-and-PEXPIRE (the patterns of Redis' own documentation), with redis-py's
    defaults; in the failover trials, the primary that the Sentinels name (redis-py's
    Sentinel client)."""

    name, check = "Redis (single)", None
    RELEASE = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
               "return redis.call('del', KEYS[1]) else return 0 end")
    RENEW = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
             "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end")

    def __init__(self, services):
        if hasattr(services, "sentinels"):
            self.client = Sentinel(services.sentinels).master_for(services.service)
        else:
            self.client = redis.Redis(**services.redis)
        self.release_script = self.client.register_script(self.RELEASE)
        self.renew_script = self.client.register_script(self.RENEW)

    def acquire(self, key):
        value = uuid.uuid4().hex
        if self.client.set(f"lock:{key}", value, nx=True, px=TTL_MS):
            return Grant(key, None, value)
        return None

    def release(self, grant):
        self.release_script(keys=[f"lock:{grant.key}"], args=[grant.handle])

    def renew(self, grant):
        return self.renew_script(keys=[f"lock:{grant.key}"], args=[grant.handle, TTL_MS]) == 1


class ByHand:
    """The seeds' PostgreSQL recipe: `pg_try_advisory_lock` on a session, a token from
    `nextval` of a CACHE 1 sequence, the resource's guarded UPDATE."""

    name, check = "PostgreSQL by hand", "guarded"

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


class FencedTransaction:
    """fenced_lock's transaction-scoped lock: `BEGIN; try_acquire_fenced(ns, key)`, the work,
    the resource's fenced_update, `COMMIT`."""

    name, check = "fenced_lock (transaction)", "fenced_update"

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


class OneCallLock:
    """A lock taken and released with one SQL call each, in autocommit, for an owner of this
    client's own: `ACQUIRE` returns the token (NULL when busy); both are formatted with the
    namespace, key, owner, TTL (s) and token."""

    def __init__(self, services):
        self.conn = psycopg2.connect(services.lock_dsn)
        self.conn.autocommit = True
        self.owner = uuid.uuid4().hex

    def call(self, sql, key, token=None):
        with self.conn.cursor() as cursor:
            cursor.execute(sql, {"ns": NAMESPACE, "key": key, "owner": self.owner,
                                 "ttl": TTL_MS / 1000, "token": token})
            return cursor.fetchone()[0]

    def acquire(self, key):
        token = self.call(self.ACQUIRE, key)
        return None if token is None else Grant(key, token)

    def release(self, grant):
        self.call(self.RELEASE, grant.key, grant.token)


class FencedLease(OneCallLock):
    """fenced_lock's lease: `acquire_lease(ns, key, owner, ttl)`, `renew_lease`, the
    resource's fenced_update, `release_lease`."""

    name, check = "fenced_lock (lease)", "fenced_update"
    ACQUIRE = ("SELECT acquire_lease(%(ns)s, %(key)s, %(owner)s, "
               "make_interval(secs => %(ttl)s))")
    RENEW = ("SELECT renew_lease(%(ns)s, %(key)s, %(token)s, make_interval(secs => %(ttl)s)) "
             "IS NOT NULL")
    RELEASE = "SELECT release_lease(%(ns)s, %(key)s, %(token)s)"

    def renew(self, grant):
        return self.call(self.RENEW, grant.key, grant.token)


class FencedLeader(OneCallLock):
    """fenced_lock's session lock for leader election: `become_leader(ns, key, owner)` on a
    dedicated connection (the term is the token), `release_fenced`."""

    name, check = "fenced_lock (leader)", "fenced_update"
    ACQUIRE = "SELECT become_leader(%(ns)s, %(key)s, %(owner)s)"
    RELEASE = "SELECT release_fenced(%(ns)s, %(key)s, %(owner)s)"


class RedlockLock:
    """Redlock over five independent Redis instances, through pottery (a maintained client),
    with its defaults, `auto_release_time` = the TTL and no limit to the extensions (pottery
    allows 3 by default). No token. The Redis clients do not retry and give up on a node after
    0.5 s: with redis-py's default retries, one acquire with a node down outlasts the whole
    TTL."""

    name, check = "Redlock (5 nodes)", None

    def __init__(self, services):
        self.masters = {redis.Redis(**node, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
                        for node in services.redlock}

    def acquire(self, key):
        lock = Redlock(key=f"compare-{key}", masters=self.masters,
                       auto_release_time=TTL_MS / 1000, num_extensions=sys.maxsize)
        return Grant(key, None, lock) if lock.acquire(blocking=False) else None

    def release(self, grant):
        grant.handle.release()

    def renew(self, grant):
        try:
            grant.handle.extend()
            return True
        except ExtendUnlockedLock:
            return False


class EtcdLock:
    """etcd's lease lock through etcd3gw (the v3 API's gRPC gateway): a lease of the TTL (etcd
    grants at least 2 s) and a key created under it only if absent; the token is the key's
    create_revision, which the resource checks as it would a fencing token; renewed by a
    keep-alive of the lease. Each new client talks to one of the members, at random."""

    name, check = "etcd (lease lock)", "guarded"

    def __init__(self, services):
        self.client = Etcd3Client(host="127.0.0.1", port=random.choice(services.etcd_ports),
                                  timeout=2)

    def acquire(self, key):
        lock = self.client.lock(f"compare-{key}", ttl=max(1, TTL_MS // 1000))
        if not lock.acquire():
            lock.lease.revoke()
            return None
        (_, meta), = self.client.get(lock.key, metadata=True)
        return Grant(key, int(meta["create_revision"]), lock)

    def release(self, grant):
        grant.handle.release()
        grant.handle.lease.revoke()

    def renew(self, grant):
        return grant.handle.lease.refresh() > 0


SYSTEMS = {"redis": RedisLock, "redlock": RedlockLock, "etcd": EtcdLock, "by-hand": ByHand,
           "fenced-xact": FencedTransaction, "fenced-lease": FencedLease,
           "fenced-leader": FencedLeader}


class Resource:
    """The protected data, on a PostgreSQL server of its own: one counter row per trial and
    key (`id`). A write records itself in `writes`, in the same transaction, with whether the
    resource accepted it."""

    SCHEMA = """
    CREATE EXTENSION IF NOT EXISTS fenced_lock;
    CREATE TABLE IF NOT EXISTS counters (id int PRIMARY KEY, value bigint NOT NULL,
                                         fence bigint);
    CREATE TABLE IF NOT EXISTS writes (seq bigserial PRIMARY KEY, id int, worker text,
                                       token bigint, read_value bigint, granted_ns bigint,
                                       wrote_ns bigint, accepted boolean);
    """

    def __init__(self, dsn):
        self.conn = psycopg2.connect(dsn)

    def read(self, check, row, token):
        """The counter, read under the holder's token where the system has one: the row is
        first claimed with it (fenced_update with no changes; by hand, the guarded UPDATE of
        the fence alone), so that an older holder's write after this read is refused. None
        when the claim is refused: a newer holder has been here."""
        with self.conn.cursor() as cursor:
            if check is not None and not self.guarded_update(cursor, check, row, token, None):
                self.conn.commit()
                return None
            cursor.execute("SELECT value FROM counters WHERE id = %s", (row,))
            value = cursor.fetchone()[0]
        self.conn.commit()
        return value

    @staticmethod
    def guarded_update(cursor, check, row, token, value):
        """Sets the fence to `token` (and the counter to `value`, unless None) if no higher
        token was accepted. True if written."""
        changes = {} if value is None else {"value": value}
        if check == "fenced_update":
            cursor.execute("SELECT fenced_update('counters', %s::int, %s, %s::jsonb)",
                           (row, token, json.dumps(changes)))
            return cursor.fetchone()[0]
        cursor.execute("UPDATE counters SET fence = %s, value = coalesce(%s, value) "
                       "WHERE id = %s AND (fence IS NULL OR fence <= %s)",
                       (token, value, row, token))
        return cursor.rowcount == 1

    def write(self, check, row, worker, token, value, granted_ns, wrote_ns):
        """`value` + 1 into `row`, guarded by `token` where the system has one (None for
        `value`: the read was refused, nothing is written); recorded. True if accepted."""
        with self.conn.cursor() as cursor:
            if value is None:
                accepted = False
            elif check is not None:
                accepted = self.guarded_update(cursor, check, row, token, value + 1)
            else:
                cursor.execute("UPDATE counters SET value = %s WHERE id = %s", (value + 1, row))
                accepted = True
            cursor.execute("INSERT INTO writes (id, worker, token, read_value, granted_ns, "
                           "wrote_ns, accepted) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                           (row, worker, token, value, granted_ns, wrote_ns, accepted))
        self.conn.commit()
        return accepted
