"""One client of the HA suite, a process of its own until SIGTERM:
`worker.py KIND NAME CLUSTER_DSN RESOURCE_DSN ROW_BASE WORK_MS LOG KEY [KEY ...]`.

KIND `xact`: in a loop over the keys, BEGIN; acquire_fenced(7001, key) on the cluster; claim
the key's counter at the resource with the token and read it (scripts/counters.py); work
WORK_MS; write the value + 1 with the token; COMMIT. After any error it reconnects to the same
CLUSTER_DSN (a multi-host string finds the writable node; a single host is a client pinned to
that node, as behind a stale DNS entry or a pool) and takes the lock again: a lost connection
is a lost lock.

KIND `lease`: competes for the lease on the first key (try_acquire_lease(7002, key, owner, TTL));
its holder keeps it for the whole run, renewing every third of the TTL (through whichever node
is the primary after a reconnect: a lease outlives its connection), and read-modify-writes the
counter with the lease's token every WORK_MS while the validity the server last granted (from
the renewal's start, on the monotonic clock, minus a margin) lasts. A renewal that returns NULL
or a validity that ran out ends the term; the worker then competes again.

Every operation goes to LOG (its history for the checker, checker/README.md); a grant's `ok`
carries the server's port, timeline and postmaster start (`postmaster`), and a lease's the
server's clock (`server_time`) and the expiry it granted (`expires`), in microseconds since
the epoch."""

import os
import random
import signal
import sys
import time

import psycopg2

from counters import Counters
from histories import History

XACT_NAMESPACE, LEASE_NAMESPACE = 7001, 7002
LEASE_TTL_S = 60
LEASE_MARGIN_S = 2
kind, name, cluster_dsn, resource_dsn, row_base, work_ms, log_path = sys.argv[1:8]
keys = [int(key) for key in sys.argv[8:]]
row_base, work_s = int(row_base), int(work_ms) / 1000
running = True


def stop(*_):
    global running
    running = False


signal.signal(signal.SIGTERM, stop)
history = History(log_path, name)
# A transaction lock's statement that hangs (a primary waiting for a synchronous standby that
# is gone) ends after 3 s; keepalives notice a vanished server. A lease's calls get no
# statement_timeout (README, Running under Patroni): a cancelled commit wait reports success.
KEEPALIVES = dict(keepalives=1, keepalives_idle=2, keepalives_interval=1, keepalives_count=2,
                  tcp_user_timeout=3000)
OPTIONS = {"xact": "-c statement_timeout=3000", "lease": "-c statement_timeout=0"}
# Which server answered: its port, its timeline and its postmaster's start (a server
# restarted in place on the same timeline is another incarnation).
WHERE = ("inet_server_port(), "
         "('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int, "
         "(extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint")
GRANT = f"SELECT acquire_fenced(%s, %s), {WHERE}"
EPOCH_US = "(extract(epoch FROM {}) * 1000000)::bigint"
TTL = "make_interval(secs => %s)"
# The server's clock after the call, and the expiry as granted at most then.
LEASE = (f"SELECT lease, {EPOCH_US.format('clock_timestamp()')}, "
         f"{EPOCH_US.format('clock_timestamp() + ' + TTL)}, {WHERE} "
         f"FROM try_acquire_lease(%s, %s, %s, {TTL}) lease")
RENEW = (f"SELECT {EPOCH_US.format('expiry')}, {EPOCH_US.format('clock_timestamp()')}, "
         f"{WHERE} FROM renew_lease(%s, %s, %s, {TTL}) expiry")


def answered(server):
    """WHERE's columns as a history's fields."""
    port, timeline, started = server
    return {"port": port, "timeline": timeline, "postmaster": started}


def lost(error):
    """The server (or the connection to it) went away: whatever the call did is unknown."""
    code = error.pgcode
    return code is None or code.startswith(("08", "57P0")) or code == "25P03"


def connect():
    conn = psycopg2.connect(cluster_dsn, options=OPTIONS[kind], **KEEPALIVES)
    conn.autocommit = kind == "lease"
    return conn


def write_counter(resource, key, token, granted_ns):
    """Claims and reads the counter with `token`, works, writes the value + 1 back."""
    reading = history.invoke("read", key, token=token)
    value = resource.read("fenced_update", row_base + key, token)
    history.end(reading, "fail" if value is None else "ok", value=value)
    time.sleep(work_s)
    writing = history.invoke("write", key, token=token, grant=granted_ns,
                             value=None if value is None else value + 1)
    accepted = resource.write("fenced_update", row_base + key, name, token, value, granted_ns,
                              time.monotonic_ns())
    history.end(writing, "ok", accepted=accepted)


def xact_cycle(cluster, resource):
    key = random.choice(keys)
    acquiring = history.invoke("acquire", key)
    with cluster.cursor() as cursor:
        cursor.execute(GRANT, (XACT_NAMESPACE, key))
        token, *server = cursor.fetchone()
    history.end(acquiring, "ok", token=token, **answered(server))
    write_counter(resource, key, token, time.monotonic_ns())
    releasing = history.invoke("release", key, token=token)
    cluster.commit()
    history.end(releasing, "ok")


class Term:
    """The lease this worker holds: its token, its grant's time, the validity the server last
    granted (monotonic seconds) and when to renew."""

    def __init__(self, token, asked_at):
        self.token, self.granted_ns = token, time.monotonic_ns()
        self.valid_until = asked_at + LEASE_TTL_S - LEASE_MARGIN_S
        self.renew_at = asked_at + LEASE_TTL_S / 3


def lease_step(cluster, resource, term, terms):
    """One step of the lease worker; returns the term it holds after it (None: none). Each
    term has an owner of its own (`terms`, the terms begun so far): a worker that gave up a
    term whose validity ran out must not be handed the same token again as its owner."""
    # The lease is the trial's own (its key at the resource, counted from the trial's rows).
    key, owner = keys[0], f"{name}-{os.getpid()}-{terms}"
    lease = row_base + key
    if term is None:
        acquiring = history.invoke("acquire", key)
        asked_at = time.monotonic()
        with cluster.cursor() as cursor:
            cursor.execute(LEASE, (LEASE_TTL_S, LEASE_NAMESPACE, lease, owner, LEASE_TTL_S))
            token, server_time, expires, *server = cursor.fetchone()
        if token is None:
            history.end(acquiring, "fail")
            time.sleep(0.2)
            return None
        history.end(acquiring, "ok", token=token, server_time=server_time, expires=expires,
                    **answered(server))
        return Term(token, asked_at)
    if time.monotonic() >= term.valid_until:
        return None
    if time.monotonic() >= term.renew_at:
        renewing = history.invoke("renew", key, token=term.token)
        asked_at = time.monotonic()
        with cluster.cursor() as cursor:
            cursor.execute(RENEW, (LEASE_NAMESPACE, lease, term.token, LEASE_TTL_S))
            expires, server_time, *server = cursor.fetchone()
        if expires is None:
            history.end(renewing, "fail", server_time=server_time)
            return None
        history.end(renewing, "ok", server_time=server_time, expires=expires,
                    **answered(server))
        term.valid_until = asked_at + LEASE_TTL_S - LEASE_MARGIN_S
        term.renew_at = asked_at + LEASE_TTL_S / 3
    write_counter(resource, key, term.token, term.granted_ns)
    return term


def main():
    cluster = resource = term = None
    terms = 0
    while running:
        try:
            if cluster is None:
                cluster = connect()
            if resource is None:
                resource = Counters(resource_dsn)
            if kind == "xact":
                xact_cycle(cluster, resource)
            else:
                held = term
                term = lease_step(cluster, resource, term, terms)
                terms += held is not None and term is not held
        except psycopg2.Error as error:
            # Counted in the history, never swallowed: the server went away (info), or it
            # refused the call with an error of its own (fail: a standby's 25006, a cancelled
            # wait's 57014). Either ends the cycle; the worker reconnects to the same DSN.
            history.abandon(error, error.pgcode or "connection", lost(error))
            for conn in (cluster, resource and resource.conn):
                try:
                    conn and conn.close()
                except psycopg2.Error:
                    pass
            cluster = resource = None
            if term is not None:
                # Whether the lease outlived the connection is known only from a renewal:
                # the next step renews at once (through the node that answers now).
                term.renew_at = 0
            time.sleep(0.2 if error.pgcode == "25006" else 0.05)
        if kind == "lease" and term is not None:
            time.sleep(work_s)


main()
