"""One client of the HA suite, a process of its own until SIGTERM:
`worker.py NAME CLUSTER_DSN RESOURCE_DSN LOG KEY [KEY ...]`.

In a loop over the hot keys: BEGIN; acquire_fenced(ns, key) on the cluster's primary; write to
the resource (a server outside the cluster) with fenced_update and that token; COMMIT. After any
error on the cluster it reconnects (the multi-host DSN finds the writable node) and goes on: a
lost connection is a lost lock. Every token it is returned is logged, before it is used:
    G name key token port timeline monotonic_ns
    W name key token accepted|refused monotonic_ns
    E name monotonic_ns SQLSTATE"""

import random
import signal
import sys
import time

import psycopg2

NAMESPACE = 7001
name, cluster_dsn, resource_dsn, log_path = sys.argv[1:5]
keys = [int(key) for key in sys.argv[5:]]
running = True


def stop(*_):
    global running
    running = False


signal.signal(signal.SIGTERM, stop)
out = open(log_path, "a", buffering=1)
# A statement that hangs (a primary waiting for a synchronous standby that is gone) ends after
# 3 s; keepalives notice a vanished server.
CLUSTER_OPTIONS = dict(options="-c statement_timeout=3000", keepalives=1, keepalives_idle=2,
                       keepalives_interval=1, keepalives_count=2, tcp_user_timeout=3000)
GRANT = ("SELECT acquire_fenced(%s, %s), inet_server_port(), "
         "('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int")
WRITE = "SELECT fenced_update('resource', %s, %s, jsonb_build_object('writer', %s::text))"
RECORD = ("INSERT INTO writes (client, key, token, port, timeline, accepted) "
          "VALUES (%s, %s, %s, %s, %s, %s)")

resource = psycopg2.connect(resource_dsn)
cluster = None
while running:
    try:
        if cluster is None:
            cluster = psycopg2.connect(cluster_dsn, **CLUSTER_OPTIONS)
        key = random.choice(keys)
        with cluster.cursor() as cursor:
            cursor.execute(GRANT, (NAMESPACE, key))
            token, port, timeline = cursor.fetchone()
        out.write(f"G {name} {key} {token} {port} {timeline} {time.monotonic_ns()}\n")
        with resource.cursor() as cursor:
            cursor.execute(WRITE, (key, token, name))
            accepted = cursor.fetchone()[0]
            cursor.execute(RECORD, (name, key, token, port, timeline, accepted))
        resource.commit()
        out.write(f"W {name} {key} {token} {'accepted' if accepted else 'refused'} "
                  f"{time.monotonic_ns()}\n")
        cluster.commit()
    except psycopg2.Error as error:
        if error.pgcode is None and resource.closed:
            raise
        out.write(f"E {name} {time.monotonic_ns()} {error.pgcode or 'connection'}\n")
        try:
            resource.rollback()
        except psycopg2.Error:
            pass
        if cluster is not None:
            try:
                cluster.close()
            except psycopg2.Error:
                pass
        cluster = None
        time.sleep(0.05)
out.close()
