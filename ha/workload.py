"""The workload that runs through every fault: the resource server outside the cluster, four
token clients (worker.py) and three lease leaders (examples/leader --lease)."""

import os
import subprocess
import sys
import threading
import time

import psycopg2

from cluster import HERE, ROOT, log
from real_parts import dsn_of, pg, pg_stop

HOT_KEYS = [1, 2, 3]
CLIENTS = 4
LEADERS = 3
LEASE_TTL_MS = 2000
LEADER_BINARY = os.path.join(ROOT, "target/faults/debug/fenced_leader")

RESOURCE_SCHEMA = """
CREATE EXTENSION IF NOT EXISTS fenced_lock;
DROP TABLE IF EXISTS resource, writes, leader_work, leader_log;
CREATE TABLE resource (id int PRIMARY KEY, fence bigint, writer text);
INSERT INTO resource SELECT key, NULL, NULL FROM unnest(%(keys)s::int[]) key;
-- Every write a client tried, in the order the resource took them: an accepted write holds
-- its row's lock until it commits, so accepted writes to one key are in commit order.
CREATE TABLE writes (seq bigserial PRIMARY KEY, client text, key int, token bigint, port int,
                     timeline int, accepted boolean);
CREATE TABLE leader_work (id int PRIMARY KEY, fence bigint, leader text, beat int);
INSERT INTO leader_work VALUES (1, NULL, NULL, 0);
CREATE TABLE leader_log (seq bigserial PRIMARY KEY, fence bigint, leader text);
CREATE OR REPLACE FUNCTION log_leader_work() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO leader_log (fence, leader) VALUES (NEW.fence, NEW.leader);
    RETURN NEW;
END $$;
CREATE TRIGGER log_leader_work AFTER UPDATE ON leader_work
    FOR EACH ROW EXECUTE FUNCTION log_leader_work();
"""


class Resource:
    """A PostgreSQL server of its own (scripts/pg.sh, on a Unix socket), with fenced_lock for
    fenced_update: a split brain inside the cluster cannot hide a stale write here."""

    def __init__(self, directory):
        self.directory = directory
        pg("start", directory)
        self.dsn = dsn_of(directory)

    def reset(self):
        with psycopg2.connect(self.dsn) as conn:
            conn.cursor().execute(RESOURCE_SCHEMA, {"keys": HOT_KEYS})

    def query(self, sql, args=()):
        with psycopg2.connect(self.dsn) as conn:
            cursor = conn.cursor()
            cursor.execute(sql, args)
            return cursor.fetchall()

    def stop(self):
        pg_stop(self.directory)


class Workload:
    """Starts the clients and leaders; `stop` ends them and returns the leaders' events as
    (monotonic_ns, words) and the clients' log paths."""

    def __init__(self, processes, directory, cluster, resource):
        self.processes, self.directory = processes, directory
        self.client_logs = [os.path.join(directory, f"client{i}.events") for i in
                            range(1, CLIENTS + 1)]
        self.leader_events = []
        self.threads = []
        kv = cluster.kv_dsn()
        self.own = []
        for i, path in enumerate(self.client_logs, 1):
            self.own.append(self.processes.spawn(f"client{i}", [
                sys.executable, os.path.join(HERE, "worker.py"), f"c{i}", kv, resource.dsn,
                path, *map(str, HOT_KEYS)]))
        for i in range(1, LEADERS + 1):
            leader = subprocess.Popen(
                [LEADER_BINARY, "--url", kv, "--resource-url", resource.dsn, "--name", f"l{i}",
                 "--lease", str(LEASE_TTL_MS), "--seconds", "100000", "--ns", "7002"],
                stdout=subprocess.PIPE, stderr=open(os.path.join(directory, f"leader{i}.log"),
                                                    "ab"),
                stdin=subprocess.DEVNULL, start_new_session=True, text=True)
            self.processes.started.append(leader)
            self.own.append(leader)
            thread = threading.Thread(target=self.read_events, args=(leader,), daemon=True)
            thread.start()
            self.threads.append(thread)
        log(f"workload: {CLIENTS} clients on keys {HOT_KEYS}, {LEADERS} lease leaders "
            f"(TTL {LEASE_TTL_MS} ms)")

    def read_events(self, leader):
        for line in leader.stdout:
            self.leader_events.append((time.monotonic_ns(), line.split()))

    def stop(self):
        for process in self.own:
            process.terminate()
        for process in self.own:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for thread in self.threads:
            thread.join(timeout=5)
        return sorted(self.leader_events, key=lambda event: event[0]), self.client_logs
