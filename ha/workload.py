"""The workload that runs through each fault (a trial): the resource server outside the
cluster, and the trial's workers (worker.py), all writing their histories:

- three clients on a multi-host connection string (`target_session_attrs=read-write`),
- two clients through HAProxy (cluster.HAProxy), as clients without multi-host strings,
- two clients pinned to each node by host (as a client behind a stale DNS entry or a pool),
  which reconnect to that node after any error, so that during a split brain clients work on
  both sides of it,
- three lease workers competing for one lease (TTL 60 s, longer than any failover here).

At the fault's start a client pinned to the primary is paused (SIGSTOP) while it holds its
key, and resumed once a holder on the new primary (or the restarted one) has written that
key: its late write is the one fencing must refuse."""

import json
import os
import signal
import sys
import time

import psycopg2

from cluster import HERE, log
from counters import create_schema, reset_rows
from histories import read_history
from real_parts import dsn_of, pg, pg_stop, wait_for

HOT_KEYS = [1, 2, 3]
# The pinned clients' keys: a paused one holds its key without stopping the others' work.
PINNED_KEYS = [4, 5, 6]
# The lease workers' key at the resource (the lease itself is the trial's own).
LEASE_KEY = 9
MULTI_HOST_CLIENTS = 3
HAPROXY_CLIENTS = 2
# The pinned clients work a little while they hold their key, so that one can be caught
# holding it; the others as fast as they can. A lease holder writes every 2 * LEASE_WORK_MS.
PINNED_WORK_MS, MULTI_HOST_WORK_MS, LEASE_WORK_MS = 100, 0, 200
LEASE_WORKERS = 3
# Rows per trial at the resource: trial N's keys are N * ROWS + key.
ROWS = 10


class Resource:
    """A PostgreSQL server of its own (scripts/pg.sh, on a Unix socket), with fenced_lock for
    fenced_update and the counters (scripts/counters.py): a split brain inside the cluster
    cannot hide a stale write here."""

    def __init__(self, directory):
        self.directory = directory
        pg("start", directory)
        self.dsn = dsn_of(directory)
        create_schema(self.dsn)

    def query(self, sql, args=()):
        with psycopg2.connect(self.dsn) as conn:
            cursor = conn.cursor()
            cursor.execute(sql, args)
            found = cursor.fetchall()
        conn.close()
        return found

    def stop(self):
        pg_stop(self.directory)


class Worker:
    def __init__(self, processes, directory, kind, name, dsn, resource, row_base, work_ms,
                 keys):
        self.name, self.kind = name, kind
        self.history = os.path.join(directory, f"{name}.history")
        self.process = processes.spawn(f"{os.path.basename(directory)}-{name}", [
            sys.executable, os.path.join(HERE, "worker.py"), kind, name, dsn, resource.dsn,
            str(row_base), str(work_ms), self.history, *map(str, keys)])

    def last_event(self):
        try:
            with open(self.history, "rb") as history:
                history.seek(0, os.SEEK_END)
                history.seek(max(0, history.tell() - 4096))
                lines = history.read().decode(errors="replace").splitlines()
            return json.loads(lines[-1]) if lines else None
        except (OSError, ValueError):
            return None


# A client's last event while it holds its key and has not yet written it, and is not inside
# a transaction at the resource (a claim in progress holds the row's lock there: paused in
# it, it would keep every newer holder out).
HOLDING = {("acquire", "ok"), ("read", "ok")}


class Trial:
    """One fault's workload: its workers, its rows at the resource, its histories."""

    def __init__(self, processes, directory, number, cluster, resource):
        self.processes, self.resource, self.number = processes, resource, number
        self.directory = os.path.join(directory, f"t{number}")
        os.makedirs(self.directory, exist_ok=True)
        self.row_base = number * ROWS
        reset_rows(resource.dsn, self.row_base, HOT_KEYS + PINNED_KEYS + [LEASE_KEY])
        self.paused = None
        kv = cluster.kv_dsn()
        self.workers = [Worker(processes, self.directory, "xact", f"m{i}", kv, resource,
                               self.row_base, MULTI_HOST_WORK_MS, HOT_KEYS)
                        for i in range(1, MULTI_HOST_CLIENTS + 1)]
        self.workers += [Worker(processes, self.directory, "xact", f"h{i}",
                                cluster.haproxy.dsn(), resource, self.row_base,
                                MULTI_HOST_WORK_MS, HOT_KEYS)
                         for i in range(1, HAPROXY_CLIENTS + 1) if cluster.haproxy]
        # Two pinned to each node: when a node's server restarts in place, the one not paused
        # is the newer holder of the paused one's key.
        self.workers += [Worker(processes, self.directory, "xact", f"{pair}{node.name}",
                                node.pinned_dsn(), resource, self.row_base, PINNED_WORK_MS,
                                PINNED_KEYS) for node in cluster.nodes for pair in "pq"]
        self.workers += [Worker(processes, self.directory, "lease", f"l{i}", kv, resource,
                                self.row_base, LEASE_WORK_MS, [LEASE_KEY])
                         for i in range(1, LEASE_WORKERS + 1)]

    def pinned(self, node):
        return next(w for w in self.workers if w.name == f"p{node.name}")

    def pause_holder(self, node, timeout=30):
        """SIGSTOPs the client pinned to `node` while it holds a key it has not yet written
        (its last event is its grant or its read): the holder whose lock the fault will end.
        Its grant (token, key) is kept in self.paused."""
        worker = self.pinned(node)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = worker.last_event()
            if event and (event["f"], event["type"]) in HOLDING:
                os.kill(worker.process.pid, signal.SIGSTOP)
                # Still before its write once stopped: the pause holds the lock.
                if worker.last_event() == event:
                    self.paused = dict(worker=worker, **self.grant_of(worker))
                    log(f"paused {worker.name} holding key {self.paused['key']} with token "
                        f"{self.paused['token']}")
                    return
                os.kill(worker.process.pid, signal.SIGCONT)
            time.sleep(0.01)
        raise RuntimeError(f"{worker.name} held no key within {timeout} s")

    @staticmethod
    def grant_of(worker):
        grants = [e for e in read_history(worker.history)
                  if e["f"] == "acquire" and e["type"] == "ok"]
        return {"key": int(grants[-1]["key"]), "token": grants[-1]["token"]}

    def resume_holder(self, timeout=60):
        """SIGCONTs the paused holder once the resource accepted a write of its key with a
        larger token (a holder on the new primary wrote it), or after `timeout`."""
        if self.paused is None:
            return
        row = self.row_base + self.paused["key"]
        try:
            wait_for(f"a newer holder's write of key {self.paused['key']}", lambda: (
                self.resource.query("SELECT count(*) FROM writes WHERE id = %s AND accepted "
                                    "AND token > %s", (row, self.paused["token"]))[0][0]),
                timeout, interval=0.2)
        finally:
            os.kill(self.paused["worker"].process.pid, signal.SIGCONT)
            log(f"resumed {self.paused['worker'].name}")

    def await_renewal(self, port, old_postmaster, timeout):
        """Until a lease worker's renewal succeeded on the server at `port` (other than the
        postmaster that started at `old_postmaster`: a holder learns whether its lease
        outlived the fault at its next renewal, at most a third of the TTL after it), or
        `timeout`."""
        def renewed():
            return any(event["type"] == "ok" and event["f"] == "renew" and
                       event["port"] == port and event["postmaster"] != old_postmaster
                       for worker in self.workers if worker.kind == "lease"
                       for event in read_history(worker.history))
        try:
            wait_for("the lease's renewal on the new primary", renewed, timeout, interval=0.5)
        except RuntimeError as error:
            log(str(error))

    def stop(self):
        """Ends every worker (resumed first, should one still be paused); the names of those
        that died on their own before."""
        died = [w.name for w in self.workers if w.process.poll() is not None]
        for worker in self.workers:
            if worker.process.poll() is None:
                os.kill(worker.process.pid, signal.SIGCONT)
                worker.process.terminate()
        for worker in self.workers:
            try:
                worker.process.wait(timeout=15)
            except Exception:
                worker.process.kill()
                died.append(worker.name)
        return died
