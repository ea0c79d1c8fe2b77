"""The failure table, measured: each lock system through the same faults, counting what it
lets through at a resource that records every write (`make compare`; QUICK=1 in `make test`).

    compare.py DIRECTORY [--quick] [--only NAME]

--only NAME runs the faults whose names contain NAME, without the throughput row.

Writes DIRECTORY/compare.md (and docs/compare.md from a full run, by `make compare`)."""

import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict

import psycopg2

from services import ADVISED_TCP, HERE, Clock, Services
from counters import commits, reset_rows
from real_parts import commit_measured, first_line
from histories import check_trial, history_of, read_history
from systems import BASE, CONNECTION_BOUND, FENCED_LOCK, SYSTEMS, THROUGHPUT, TTL_MS

# What the checker counts that fencing allows: a holder whose lease ended while it worked may
# still write before its successor reaches the resource (the successor then reads that
# write); what fencing must prevent is any other kind.
CHECKER_OVERLAPS = ("two_holders",)

WORKERS = 3
HOT_KEYS = [1, 2]
# The rest of the application, in the failover trials: keys no hot-key worker takes.
OTHER_KEYS = list(range(100, 164))
WARM_S = 0.5
PG_SYSTEMS = ("by-hand", "fenced-xact", "fenced-lease", "fenced-leader")
# The short form's systems (`--quick`, in make test), and its throughput row's.
QUICK_SYSTEMS = FENCED_LOCK + ("redis", "redlock", "fenced-control")
QUICK_THROUGHPUT = ("redis", "by-hand", "fenced-xact", "fenced-lease", "fenced-lease-unflushed",
                    "fenced-leader")
# PostgreSQL's defaults for its TCP settings (0: the kernel's), for a lost host's second cell.
DEFAULT_TCP = {name: 0 for name in ADVISED_TCP}
# How long after the fault every hot key must again have an accepted write (liveness).
LIVENESS_S = 15


def idle_timeout_ms(work_ms):
    """The README's idle_in_transaction_session_timeout for work inside a transaction: above
    the longest work (twice it, at least 1 s), so that only a stalled holder is ended."""
    return max(1000, 2 * work_ms)


def kernel_setting(name):
    with open(f"/proc/sys/net/ipv4/{name}") as setting:
        return int(setting.read())


class Trial:
    """Workers of one system on the hot keys, through one fault."""

    def __init__(self, directory, services, system, fault, number):
        self.directory, self.number = directory, number
        self.services, self.system, self.fault = services, system, fault
        self.work_ms = fault.work_ms
        self.idle_timeout_ms = idle_timeout_ms(self.work_ms)
        self.row_base = number * 10
        self.fault_key = self.fault_start = self.fault_end = self.killed = None
        self.logs = [os.path.join(directory, f"t{number}-w{i}.events") for i in
                     range(WORKERS)]
        reset_rows(services.resource_dsn, self.row_base, HOT_KEYS)
        fault.prepare(self)
        self.workers = [self.spawn(f"w{i}", str(self.row_base), self.work_ms, path, HOT_KEYS,
                                   fault.endpoints(self, i), i if fault.namespaced else None)
                        for i, path in enumerate(self.logs)]
        self.token_logs = list(self.logs)
        if fault.background:
            self.token_logs.append(os.path.join(directory, f"t{number}-rest.events"))
            self.workers.append(self.spawn("rest", "none", 0, self.token_logs[-1], OTHER_KEYS,
                                           fault.endpoints(self, None)))

    def application_name(self, worker):
        return f"compare-t{self.number}-{worker}"

    def spawn(self, name, row_base, work_ms, path, keys, endpoints, namespace=None):
        """A worker process; in network namespace `namespace` when given, reaching the lock
        services over TCP through it."""
        values = {**self.services.values(), **endpoints}
        if namespace is not None:
            values.update(self.services.values_in_namespace(namespace))
        settings = {"idle_in_transaction_session_timeout": self.idle_timeout_ms,
                    **(DEFAULT_TCP if self.fault.server_defaults else {})}
        options = " ".join(f"-c {name}={value}" for name, value in settings.items())
        values["lock_dsn"] += (f" application_name={self.application_name(name)}"
                               f" options='{options}'")
        argv = [sys.executable, os.path.join(HERE, "worker.py"), self.system, name,
                json.dumps(values), row_base, str(work_ms), path, *map(str, keys)]
        if namespace is not None:
            argv = self.services.namespaces.command(namespace, argv)
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                stderr=open(path + ".stderr", "ab"), stdin=subprocess.DEVNULL)

    def holder(self, timeout=10, since=0):
        """A worker that was granted a key (after `since`) less than a quarter of its work ago
        (so that the fault lands inside its critical section): (process, key, granted_ns)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process, path in zip(self.workers, self.logs):
                last = last_grant_or_write(path)
                if last and last[0] == "G":
                    granted = int(last[4])
                    if granted > since and time.monotonic_ns() - granted < self.work_ms * 1e6 / 4:
                        return process, int(last[2]), granted
            time.sleep(0.002)
        raise RuntimeError("no worker was seen holding a key")

    def hit(self, key):
        """The fault reaches the holder of `key` now."""
        self.fault_key, self.fault_start = key, time.monotonic_ns()

    def ended(self):
        """The fault is over now (what it stopped, restarted or cut is back)."""
        self.fault_end = time.monotonic_ns()

    def next_grant_s(self, since=None):
        """Seconds from the fault (or `since`) to the first grant of its key after it, or
        None."""
        since = self.fault_start if since is None else since
        grants = [int(line[4]) for path in self.token_logs for line in read_lines(path)
                  if line[0] == "G" and int(line[2]) == self.fault_key and int(line[4]) > since]
        return (min(grants) - since) / 1e9 if grants else None

    def live_keys(self):
        """The hot keys with an accepted write granted after the fault ended."""
        with psycopg2.connect(self.services.resource_dsn) as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT DISTINCT id - %s FROM writes WHERE id >= %s AND id < %s "
                           "AND accepted AND granted_ns > %s",
                           (self.row_base, self.row_base, self.row_base + 10, self.fault_end))
            live = {row[0] for row in cursor.fetchall()}
        conn.close()
        return live

    def await_liveness(self):
        """Until every hot key has an accepted write granted after the fault ended (at most
        LIVENESS_S and two work times); whether each did."""
        deadline = time.monotonic() + LIVENESS_S + 2 * self.work_ms / 1000
        while time.monotonic() < deadline:
            if self.live_keys() >= set(HOT_KEYS):
                return True
            time.sleep(0.1)
        return False

    def stop(self):
        for process in self.workers:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.terminate()
        for process in self.workers:
            process.wait(timeout=30)
        # A worker that raised stopped measuring (its traceback is in its .stderr); only the
        # holder a fault killed is excused. A negative exit status is the signal that ended it.
        self.died = [f"{os.path.basename(path)} (exit {process.returncode})"
                     for process, path in zip(self.workers, self.token_logs)
                     if process.returncode != 0 and process is not self.killed]
        self.fault.clean_up(self)


def last_grant_or_write(path):
    for line in reversed(read_lines(path)):
        if line[0] in "GWA":
            return line
    return None


class Fault:
    """One column of the table: the systems it applies to, the holders' work time (ms), the
    fenced_lock cells whose fault frees the lock (each must show two holders or a refused
    write in some trial, else it missed its window), whether the rest of the application
    draws tokens on other keys meanwhile, whether the workers run in network namespaces of
    their own, and what it does to a trial."""

    work_ms = 300
    systems = BASE
    frees = ()
    background = False
    namespaced = False
    # The lock server's TCP settings left at PostgreSQL's defaults for this column's workers.
    server_defaults = False
    # Measured by the time to the next grant instead, within `bound_s(system)`.
    measured = False

    def expect_held(self, system):
        """Whether a measured cell's key must still be held at the cap (a control)."""
        return False

    def prepare(self, trial):
        """Before the workers start."""

    def endpoints(self, trial, worker):
        """What worker `worker` (None: the rest of the application) reaches instead of the
        shared services."""
        return {}

    def run(self, trial):
        """The fault itself: calls trial.hit() and trial.ended(); returns what it
        measured."""
        return {}

    def clean_up(self, trial):
        """After the workers stopped: the services as the next trial expects them."""


class Paused(Fault):
    """The GC-pause case: the holder is stopped for 2 x TTL inside its critical section, then
    resumes and writes. The transaction lock's server ends the stalled session after its
    idle_in_transaction_session_timeout (twice the work)."""

    name = "holder paused past its TTL"
    frees = ("fenced-lease", "fenced-xact")

    def run(self, trial):
        process, key, _ = trial.holder()
        process.send_signal(signal.SIGSTOP)
        trial.hit(key)
        time.sleep(2 * TTL_MS / 1000)
        process.send_signal(signal.SIGCONT)
        trial.ended()
        return {}


def lease_bound_s(system):
    """How soon another worker must hold a dead holder's key when its lock is a lease: the TTL
    (etcd grants the 1 s TTL as 2 s) and a margin for the next worker's retry."""
    return (2 if system == "etcd" else TTL_MS / 1000) + 1.5


class Killed(Fault):
    """kill -9 of the holder: how long until another worker holds its key."""

    name, measured = "holder killed", True

    @staticmethod
    def bound_s(system):
        """A session's or a transaction's lock ends with its connection, which the dying
        process' kernel closes: within the margin alone."""
        return 1.5 if system in CONNECTION_BOUND else lease_bound_s(system)

    def run(self, trial):
        process, key, _ = trial.holder()
        process.send_signal(signal.SIGKILL)
        trial.killed = process
        trial.hit(key)
        trial.ended()
        deadline = time.monotonic() + self.bound_s(trial.system) + 0.5
        while time.monotonic() < deadline and trial.next_grant_s() is None:
            time.sleep(0.05)
        return {"unavailable_s": trial.next_grant_s()}


class LostHost(Fault):
    """The holder's host lost: its network namespace cut off (every packet dropped, both
    ways), then the holder killed, so that no FIN or RST ever reaches the lock service. How
    long the key stays unavailable: a lease ends with its TTL, a transaction's lock with
    idle_in_transaction_session_timeout, a session's lock when the lock server gives up on
    the connection, which its TCP settings decide: here as the README advises; in the second
    column at PostgreSQL's defaults, where the harness ends the dead session at the cap, as an
    operator would."""

    measured, namespaced = True, True

    def __init__(self, server_defaults=False):
        self.server_defaults = server_defaults
        if server_defaults:
            self.name, self.systems = "lost host, PostgreSQL's TCP defaults", CONNECTION_BOUND
        else:
            self.name = "lost host"

    def bound_s(self, system):
        """A transaction's lock ends with idle_in_transaction_session_timeout (not a TCP
        setting); a session's, with the advised settings, when keepalives give an idle
        connection up (idle + interval x count) or tcp_user_timeout one with unacknowledged
        data; a lease with its TTL; each with the margin. At PostgreSQL's TCP defaults a
        session's lock must still be held at the cap."""
        if system == "fenced-xact":
            return idle_timeout_ms(self.work_ms) / 1000 + 1.5
        if system not in CONNECTION_BOUND:
            return lease_bound_s(system)
        keepalive = (ADVISED_TCP["tcp_keepalives_idle"] + ADVISED_TCP["tcp_keepalives_interval"]
                     * ADVISED_TCP["tcp_keepalives_count"])
        return max(keepalive, ADVISED_TCP["tcp_user_timeout"] / 1000) + 1.5

    def expect_held(self, system):
        return self.server_defaults and system in CONNECTION_BOUND and system != "fenced-xact"

    def cap_s(self, system):
        return self.bound_s(system) + 3

    def run(self, trial):
        process, key, _ = trial.holder()
        index = trial.workers.index(process)
        trial.services.namespaces.cut(index)
        process.send_signal(signal.SIGKILL)
        trial.killed, trial.lost_namespace = process, index
        trial.hit(key)
        deadline = time.monotonic() + self.cap_s(trial.system)
        while time.monotonic() < deadline and trial.next_grant_s() is None:
            time.sleep(0.05)
        unavailable = trial.next_grant_s()
        if self.server_defaults:
            ended = trial.services.end_sessions(trial.application_name(f"w{index}"))
            trial.ended()
            return {"unavailable_s": unavailable, "capped_at_s": self.cap_s(trial.system),
                    "sessions_ended": ended}
        trial.fault_end = trial.fault_start
        return {"unavailable_s": unavailable}

    def clean_up(self, trial):
        if getattr(trial, "lost_namespace", None) is not None:
            trial.services.namespaces.restore(trial.lost_namespace)


def bare_majority(trial):
    """Redlock's documented weakness, set up: two of the five nodes are down while a worker
    locks, so that it holds a bare majority of three, and come back empty (with the delayed
    restart, a TTL after they went down)."""
    nodes = trial.services.redlock
    for node in nodes[3:]:
        node.kill()
    down_at = time.monotonic()
    _, key, _ = trial.holder(since=time.monotonic_ns())
    if trial.system == "redlock-delayed":
        time.sleep(max(0, down_at + REDLOCK_DELAY_S - time.monotonic()))
    for node in nodes[3:]:
        node.start()
    return key


# How long a restarted Redlock node stays down first, as its specification prescribes: at
# least the TTL (here with a tenth more).
REDLOCK_DELAY_S = TTL_MS / 1000 * 1.1


def holder_stopped_through(trial, process, fault):
    """Runs `fault` (the PostgreSQL lock server's crash and what follows it) with the holder
    `process` stopped (SIGSTOP), and keeps it stopped until another worker holds its key, at
    most the work's time after the fault ended: on a busy machine crash recovery and promotion
    (their fsync) can outlast the work, and the holder would write before anyone could take
    its key. Its lock or connection is gone with the crash, its lease runs out on the TTL it
    could not renew either way."""
    process.send_signal(signal.SIGSTOP)
    fault()
    trial.ended()
    deadline = time.monotonic() + trial.work_ms / 1000
    while time.monotonic() < deadline and trial.next_grant_s() is None:
        time.sleep(0.01)
    process.send_signal(signal.SIGCONT)


class Restarted(Fault):
    """The lock service restarted while a lock is held: Redis without persistence (for
    Redlock, one of a bare majority's nodes), one etcd member (kill -9, started again on its
    data), the PostgreSQL lock server crashed (immediate stop) and started again. The work
    outlasts the restart (the PostgreSQL lock server's holder is stopped through it until
    another worker holds its key)."""

    name, work_ms = "lock service restart", 3000
    frees = FENCED_LOCK
    systems = BASE + ("redis-aof", "redlock-delayed")

    def run(self, trial):
        services, family = trial.services, SYSTEMS[trial.system].family
        if family == "redlock":
            trial.hit(bare_majority(trial))
            if trial.system == "redlock-delayed":
                services.redlock[0].kill()
                time.sleep(REDLOCK_DELAY_S)
                services.redlock[0].start()
            else:
                services.redlock[0].restart()
            trial.ended()
        elif family == "postgres":
            process, key, _ = trial.holder()
            trial.hit(key)
            holder_stopped_through(trial, process, services.crash_lock_server)
        else:
            trial.hit(trial.holder()[1])
            if trial.system == "redis-aof":
                services.redis_aof.restart(keep_data=True)
            elif family == "redis":
                services.redis.restart()
            else:
                services.etcd.restart(0)
            trial.ended()
        return {}


class Failover(Fault):
    """The primary lost while a lock is held: Redis' primary killed and its replica promoted
    by the Sentinels; etcd's leader killed; the PostgreSQL primary crashed and its standby
    promoted. Asynchronous replication lags at the worst moment: the replica's (standby's)
    link is held back from the moment the holder takes its lock, while the rest of the
    application goes on taking other keys. The holders' work outlasts the failover (the
    PostgreSQL holder is stopped through it until another worker holds its key)."""

    name, work_ms, background = "failover", 4000, True
    systems = ("redis", "redis-careful", "redis-wait", "etcd") + PG_SYSTEMS + ("fenced-control",)
    frees = FENCED_LOCK
    synchronous = False

    def prepare(self, trial):
        name, services = f"t{trial.number}", trial.services
        settings = getattr(SYSTEMS[trial.system], "SETTINGS", ())
        family = SYSTEMS[trial.system].family
        trial.replicated = (services.redis_with_sentinels(name) if family == "redis" else
                            services.etcd_leader() if family == "etcd" else
                            services.postgres_with_standby(name, self.synchronous, settings))

    def endpoints(self, trial, worker):
        return trial.replicated.values()

    def run(self, trial):
        # WAIT takes no lock while the replica lags: its holder locks first, then the lag
        # begins (its renewals then reach the primary alone).
        waits = trial.system == "redis-wait"
        if not self.synchronous and not waits:
            trial.replicated.hold_back()
        process, key, _ = trial.holder(since=time.monotonic_ns())
        trial.hit(key)
        if waits:
            trial.replicated.hold_back()
        time.sleep(0.5)
        if SYSTEMS[trial.system].family == "postgres":
            holder_stopped_through(trial, process, trial.replicated.fail)
        else:
            trial.replicated.fail()
            trial.ended()
        return {}

    def clean_up(self, trial):
        trial.replicated.stop()


class SynchronousFailover(Failover):
    """The PostgreSQL primary crashed while a lock is held, its synchronous standby
    promoted."""

    name, synchronous = "failover to a synchronous standby", True
    systems, work_ms = PG_SYSTEMS, 2000


class ClockJump(Fault):
    """A lock server's wall clock jumps forward a minute (libfaketime) while a lock is held:
    the single Redis, one of a Redlock bare majority's nodes, or the PostgreSQL server of
    fenced_lock's lease (its expiry is on the database's clock, so the lease ends at once)."""

    name, work_ms = "clock jump", 3000
    systems = ("redis", "redis-careful", "redlock", "redlock-careful", "fenced-lease")
    frees = ("fenced-lease",)

    def prepare(self, trial):
        trial.clock = Clock(trial.directory, f"t{trial.number}")
        family = SYSTEMS[trial.system].family
        if family == "postgres":
            trial.skewed = trial.services.postgres_on_clock(f"t{trial.number}-lock", trial.clock)
            return
        trial.skewed = (trial.services.redis if family == "redis"
                        else trial.services.redlock[0])
        trial.skewed.restart(trial.clock)

    def endpoints(self, trial, worker):
        return trial.skewed.values() if SYSTEMS[trial.system].family == "postgres" else {}

    def run(self, trial):
        trial.hit(bare_majority(trial) if SYSTEMS[trial.system].family == "redlock"
                  else trial.holder()[1])
        trial.clock.jump(60)
        trial.ended()
        return {}

    def clean_up(self, trial):
        if SYSTEMS[trial.system].family == "postgres":
            trial.skewed.stop()
        else:
            trial.skewed.restart()


class Partitioned(Fault):
    """The holder cut off from its lock service for 4 x TTL: its network namespace's packets
    dropped both ways (nothing passes, nothing is acknowledged), while the resource stays
    reachable on its Unix socket; it goes on with its work, which outlasts the partition, and
    writes. The lock server gives a session up after its keepalives (3 s here)."""

    name, work_ms, namespaced = "partition", 5000, True
    frees = FENCED_LOCK

    def run(self, trial):
        process, key, _ = trial.holder()
        index = trial.workers.index(process)
        trial.services.namespaces.cut(index)
        trial.hit(key)
        time.sleep(4 * TTL_MS / 1000)
        trial.services.namespaces.restore(index)
        trial.ended()
        return {}


FAULTS = [Paused(), Killed(), LostHost(), LostHost(server_defaults=True), Restarted(),
          Failover(), SynchronousFailover(), ClockJump(), Partitioned()]
# The cells whose system is unavailable after the fault by its design, and why.
UNAVAILABLE_AFTER = {
    ("redis-wait", "failover"): "WAIT 1 needs a replica's acknowledgement, and the promoted "
                                "replica has none: no lock is granted until a replica joins",
}
# Why a system has no cell in a column.
NOT_APPLICABLE = {
    "the variant rows": "Redis with AOF and Redlock's delayed restart are about a restart, "
                        "Redis with WAIT about a failover: each runs in that column only.",
    "lost host, PostgreSQL's TCP defaults": "only a lock that lives as long as its "
                                            "connection depends on the lock server's TCP "
                                            "settings.",
    "failover": "Redlock's five nodes are independent masters: there is nothing to fail "
                "over to.",
    "failover to a synchronous standby": "Redis replicates asynchronously (WAIT narrows the "
                                         "window, it does not make a failover wait); etcd's "
                                         "Raft log is the failover column's own.",
    "clock jump": "etcd times its leases on Go's monotonic clock; PostgreSQL's session and "
                  "transaction locks have no time in them.",
}


def read_lines(path):
    try:
        with open(path) as events:
            return [line.split() for line in events if line.strip()]
    except FileNotFoundError:
        return []


def analyse(trial, measured):
    """What the trial's history says (check_history) and what the resource recorded: writes,
    writes refused, liveness after the fault, the errors the workers met by code, and what
    the fault measured."""
    with psycopg2.connect(trial.services.resource_dsn) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT count(*), count(*) FILTER (WHERE NOT accepted) FROM writes "
                       "WHERE id >= %s AND id < %s", (trial.row_base, trial.row_base + 10))
        writes, refused = cursor.fetchone()
    conn.close()
    summary = check_history(trial)
    errors, lost = Counter(), 0
    for path in trial.token_logs:
        for event in read_history(history_of(path)):
            code = event.get("code")
            if code == "lost":
                lost += 1
            elif code is not None:
                errors[f"{event['f']} {code}"] += 1
    return {"writes": writes, "refused": refused, "died": trial.died,
            "live": trial.live, "errors": dict(errors), "lost_service": lost,
            "checker": None if summary is None else summary["violations"],
            "events": None if summary is None else summary["harmful_events"], **measured}


def check_history(trial):
    """The trial's history (its workers' operations and the resource's accepted writes in
    commit order) in DIRECTORY/tN.history, read by the checker: its summary (violations by
    kind, harmful events), or None when it could not read the history."""
    return check_trial(os.path.join(trial.directory, f"t{trial.number}.history"),
                       [history_of(log) for log in trial.token_logs],
                       commits(trial.services.resource_dsn, trial.row_base, 10))


THROUGHPUT_CLIENTS = 8
# Rounds of the throughput row in a full run (the short form runs one).
THROUGHPUT_ROUNDS = 3


def durable_writes(services, system):
    """How many times the lock service has synced its log to disk so far (None where the
    system's configuration says instead): PostgreSQL's pg_stat_wal.wal_sync on the lock
    server, the sum of etcd's members' WAL fsyncs (its /metrics)."""
    family = SYSTEMS[system].family
    if family == "postgres":
        with psycopg2.connect(services.lock_dsn) as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT wal_sync FROM pg_stat_wal")
            synced = cursor.fetchone()[0]
        conn.close()
        return synced
    if family == "etcd":
        synced = 0
        for port in services.etcd.client_ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
                for line in page.read().decode().splitlines():
                    if line.startswith("etcd_disk_wal_fsync_duration_seconds_count"):
                        synced += float(line.split()[1])
        return synced
    return None


def throughput(services, seconds, systems=THROUGHPUT, rounds=THROUGHPUT_ROUNDS):
    """Lock cycles per second per system, 8 client processes, random keys and one hot key, in
    `rounds` rounds (the systems' order reversed every other round, so that none always runs
    first or last): a system's rate is the median of its rounds', and each round keeps its
    rates so that the report divides by Redis' of the same round. Also the lock service's
    durable writes (log syncs) per cycle, over every round."""
    rows = {system: {"random rounds": [], "hot rounds": [], "random errors": 0,
                     "hot errors": 0, "random broken": 0, "hot broken": 0, "cycles": 0,
                     "synced": None} for system in systems}
    for number in range(rounds):
        for system in systems if number % 2 == 0 else systems[::-1]:
            row = rows[system]
            synced_before = durable_writes(services, system)
            for keys in ("random", "hot"):
                cycles, errors, broken = throughput_run(services, system, seconds, keys)
                row[f"{keys} rounds"].append(cycles / seconds)
                row[f"{keys} errors"] += errors
                row[f"{keys} broken"] += broken
                row["cycles"] += cycles
            if synced_before is not None:
                row["synced"] = (row["synced"] or 0) + (
                    durable_writes(services, system) - synced_before)
            print(f"{SYSTEMS[system].name}, round {number + 1}: "
                  f"{row['random rounds'][-1]:.0f} cycles/s on random keys, "
                  f"{row['hot rounds'][-1]:.0f} on one hot key", flush=True)
    for system, row in rows.items():
        row["random"] = statistics.median(row["random rounds"])
        row["hot"] = statistics.median(row["hot rounds"])
        if row["synced"] is not None:
            row["durable"] = f"{row['synced'] / max(row['cycles'], 1):.2f}"
        elif system == "redis-aof":
            # appendfsync everysec: one sync a second, whatever the cycles.
            row["durable"] = f"{2 * seconds * rounds / max(row['cycles'], 1):.4f} (one a second)"
        else:
            row["durable"] = "0 (no persistence)"
    return rows


def throughput_run(services, system, seconds, keys):
    """One run of THROUGHPUT_CLIENTS clients: started together once every one has imported its
    modules and made its client (a client's imports take a good part of a second of CPU, which
    must not fall into another's window); its cycles, its failed calls, and how many clients
    crashed or printed nothing (a row with any fails its check)."""
    clients = [subprocess.Popen(
        [sys.executable, os.path.join(HERE, "throughput.py"), system,
         json.dumps(services.values()), str(seconds), keys],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(THROUGHPUT_CLIENTS)]
    deadline = time.monotonic() + 60
    for client in clients:
        # A client that died says nothing ("" at its end of file) and is counted below.
        if select.select([client.stdout], [], [], max(0, deadline - time.monotonic()))[0]:
            client.stdout.readline()
    for client in clients:
        try:
            client.stdin.write("\n")
            client.stdin.flush()
        except BrokenPipeError:
            pass
    counts = [client.communicate(timeout=seconds + 60)[0].split() for client in clients]
    broken = sum(1 for client, count in zip(clients, counts)
                 if client.returncode != 0 or len(count) != 2)
    counts = [count for count in counts if len(count) == 2]
    return sum(int(c[0]) for c in counts), sum(int(c[1]) for c in counts), broken


def main():
    directory = os.path.abspath(sys.argv[1])
    quick = "--quick" in sys.argv[2:]
    # --only NAME: the faults whose names contain NAME, and no throughput row (to iterate).
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    faults = [fault for fault in FAULTS if only is None or only in fault.name]
    trials = 1 if quick else 3
    if quick:
        # The short form: fenced_lock's cells in every column, beside the systems without
        # fencing that show each fault reaching its window (Redis, Redlock) and the controls
        # that must fail (by hand and fenced_lock's control, in the failover columns); the
        # careful clients in the pause column only (their check is the same code in every
        # column). etcd and the variants run in the full form.
        for fault in faults:
            fault.systems = tuple(
                system for system in fault.systems
                if system in QUICK_SYSTEMS
                or (system == "by-hand" and isinstance(fault, Failover))
                or (SYSTEMS[system].careful and isinstance(fault, Paused)))
    os.makedirs(directory, exist_ok=True)
    services = Services(directory)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = defaultdict(list)
    started = time.monotonic()
    try:
        services.start()
        number = 0
        for fault in faults:
            for system in fault.systems:
                for _ in range(trials):
                    number += 1
                    trial = Trial(directory, services, system, fault, number)
                    try:
                        time.sleep(WARM_S)
                        measured = fault.run(trial)
                        trial.live = trial.await_liveness()
                        measured.setdefault("unavailable_s", trial.next_grant_s())
                        measured["fault_s"] = (trial.fault_end - trial.fault_start) / 1e9
                    finally:
                        trial.stop()
                    result = analyse(trial, measured)
                    results[(system, fault.name)].append(result)
                    print(f"{SYSTEMS[system].name} / {fault.name}: {result}", flush=True)
        speeds = {} if only is not None else (
            throughput(services, 2, QUICK_THROUGHPUT, 1) if quick else throughput(services, 4))
    finally:
        services.stop()
    report(directory, faults, results, speeds, trials, time.monotonic() - started)


# The cell's counts, from the checker: two holders at once (what fencing allows, the
# resource refusing the older), then what the resource cannot undo.
COLUMNS = ("two_holders", "stale_write_accepted", "lost_update", "token_of_two_holders")


def deviations():
    """Where the comparison departs from each system's documented defaults, from the
    settings the harness used."""
    tcp = ", ".join(f"`{name} = {value}`" for name, value in ADVISED_TCP.items())
    keepalive = (kernel_setting("tcp_keepalive_time"), kernel_setting("tcp_keepalive_intvl"),
                 kernel_setting("tcp_keepalive_probes"))
    return [
        f"Every TTL is {TTL_MS / 1000:g} s (users configure seconds to minutes), so that a "
        "trial lasts seconds; etcd grants a 1 s lease as 2 s.",
        "Redlock's Redis clients do not retry and give up on a node after 0.5 s (redis-py's "
        "default retries make one acquire with a node down outlast the whole TTL); the single "
        "Redis uses redis-py's defaults. pottery allows 3 extensions of a Redlock by default; "
        "here, any number, so that a holder can renew through its work.",
        "Leases are renewed every third of the TTL by a watchdog thread in the worker (as "
        "Redisson's watchdog and etcd's keep-alive do); a failed renewal does not stop the "
        "work, since a check before the write cannot close the window (a pause can fall "
        "between the check and the write).",
        "The token systems claim the row with their token before reading it (fenced_update "
        "with no changes; by hand and for etcd, the guarded UPDATE of the fence alone), so "
        "that an older holder's write after a newer holder's read is refused: fencing the "
        "write alone lets a read-modify-write lose the newer holder's update when the older "
        "one writes first.",
        "The guarded UPDATE is `WHERE fence IS NULL OR fence <= token` (the seeds write `<`), "
        "so that a holder's write passes its own claim.",
        "Redlock's restart and clock-jump trials follow its documented weakness: two of the "
        "five nodes are down while the holder locks (it holds a bare majority), come back "
        "empty, and then one of its three nodes restarts without persistence, or its clock "
        "jumps.",
        "The asynchronous failover holds the replica's (standby's) replication back from the "
        "moment the holder takes its lock (a proxy on the link stops passing bytes), as lag "
        "at the worst moment; on one machine replication is otherwise too fast to lag. A "
        "fourth worker takes other keys meanwhile, as the rest of an application would. The "
        "harness promotes the PostgreSQL standby at once after the crash (an HA manager would "
        "wait for its own timeout first); the Sentinels decide for Redis (down-after 1 s).",
        f"The PostgreSQL lock server runs with the README's TCP settings, scaled as the TTL "
        f"is: {tcp}; the lost host's second column sets them back to PostgreSQL's defaults "
        f"(0: the kernel's, here keepalives after {keepalive[0]} s idle, {keepalive[2]} probes "
        f"{keepalive[1]} s apart), per connection. Every lock connection sets "
        "`idle_in_transaction_session_timeout` to twice its trial's work time (at least "
        "1 s), as the README advises for work inside a transaction.",
        "In the partition and lost-host columns each hot-key worker runs in a network "
        "namespace of its own and reaches the lock services over TCP (the host's end of a "
        "veth pair), cut by nftables dropping every packet both ways; the resource stays on "
        "its Unix socket. Elsewhere every client uses Unix sockets (etcd: 127.0.0.1). Redis "
        "runs with `protected-mode no` to accept the namespaces' connections (it binds only "
        "loopback and the namespaces' addresses).",
        "fenced_lock's control row runs the failover column with "
        + " and ".join(f"`{setting.replace('=', ' = ')}`"
                       for setting in SYSTEMS["fenced-control"].SETTINGS)
        + ": tokens then come from a bare sequence, as by hand, and must repeat.",
    ]


def versions():
    from importlib.metadata import version
    return [first_line(["redis-server", "--version"]), first_line(["etcd", "--version"]),
            first_line(["/usr/lib/postgresql/15/bin/postgres", "--version"]),
            "clients: " + ", ".join(f"{name} {version(name)}" for name in
                                    ("redis", "pottery", "etcd3gw", "psycopg2-binary"))]


def history_format():
    """checker/README.md's description of the history format, for readers with other tools
    (elle-cli, Porcupine's visualizer)."""
    with open(os.path.join(HERE, "..", "checker", "README.md")) as readme:
        text = readme.read()
    section = text[text.index("## The history format"):text.index("## What it finds")]
    return (["Every trial's history is kept in build/compare/run as `tN.history` (its "
             "workers' `tN-wI.history` merged with the resource's commits), in the checker's "
             "format, which checker/README.md describes:", ""] +
            section.split("\n", 1)[1].strip().splitlines())


def found(runs, kind):
    """The checker's count of `kind` summed over the trials it read."""
    return sum((run["checker"] or {}).get(kind, 0) for run in runs)


def unavailable_text(fault, system, runs):
    times = [run.get("unavailable_s") for run in runs]
    if fault.expect_held(system) and any(time is None for time in times):
        return f"held > {fault.cap_s(system):.1f} s"
    known = [time for time in times if time is not None]
    return f"next holder {max(known):.1f} s" if known else "never held again"


def cell_text(fault, system, runs):
    counts = " / ".join(str(found(runs, kind)) for kind in COLUMNS)
    extras = []
    refused = sum(run["refused"] for run in runs)
    if refused:
        extras.append(f"{refused} refused")
    repeated = found(runs, "token_repeated")
    if repeated:
        extras.append(f"{repeated} tokens granted twice")
    extras.append(unavailable_text(fault, system, runs))
    errors = Counter()
    for run in runs:
        errors.update(run["errors"])
    if errors:
        extras.append("errors: " + ", ".join(f"{code} x{n}" for code, n in
                                             sorted(errors.items())))
    return counts + "; " + "; ".join(extras)


def checks_of(faults, results, speeds):
    """Every check of the run: (name, passed, detail)."""
    checks = []
    for fault in faults:
        for system in fault.systems:
            runs, name = results[(system, fault.name)], f"{SYSTEMS[system].name} / {fault.name}"
            unread = sum(run["checker"] is None for run in runs)
            checks.append((f"{name}: the checker read every trial's history", not unread,
                           f"{unread} unread" if unread else ""))
            if system in FENCED_LOCK:
                bad = Counter()
                for run in runs:
                    bad.update({kind: n for kind, n in (run["checker"] or {}).items()
                                if kind not in CHECKER_OVERLAPS})
                checks.append((f"{name}: the checker finds no repeated or falling token, stale "
                               "write, token of two holders or lost update", not bad,
                               dict(bad)))
                errors = Counter()
                for run in runs:
                    errors.update(run["errors"])
                checks.append((f"{name}: no call failed with an error other than the lost "
                               "service's", not errors, dict(errors)))
            if system in FENCED_LOCK and system in fault.frees:
                reached = sum(found([run], "two_holders") + run["refused"] > 0 for run in runs)
                took = ", ".join(f"{run['fault_s']:.1f} s" for run in runs)
                checks.append((f"{name}: the fault reached its window (two holders or a "
                               "refused write in some trial)", reached > 0,
                               "" if reached else f"missed (the fault took {took})"))
            if isinstance(fault, Failover) and not fault.synchronous and system in (
                    "by-hand", "fenced-control"):
                repeated = [found([run], "token_repeated") for run in runs]
                checks.append((f"{name}: tokens were granted twice in every trial (a control "
                               "that must fail)", all(repeated), f"{repeated}"))
            dead = [run for run in runs if not run["live"]]
            if (system, fault.name) in UNAVAILABLE_AFTER:
                checks.append((f"{name}: no key had an accepted write after the fault in any "
                               f"trial ({UNAVAILABLE_AFTER[(system, fault.name)]})",
                               len(dead) == len(runs), f"{len(runs) - len(dead)} live"))
            else:
                checks.append((f"{name}: every hot key had an accepted write after the fault "
                               "in every trial", not dead,
                               f"{len(dead)} trial(s) without" if dead else ""))
            if fault.measured and fault.expect_held(system):
                freed = [run["unavailable_s"] for run in runs if run["unavailable_s"] is not None]
                ended = [run["sessions_ended"] for run in runs]
                checks.append((f"{name}: the dead holder's key was still held at "
                               f"{fault.cap_s(system):.1f} s in every trial, until its session "
                               "was ended", not freed and all(ended),
                               f"freed after {freed} s; sessions ended {ended}"))
            elif fault.measured:
                bound = fault.bound_s(system)
                late = [run["unavailable_s"] for run in runs
                        if run["unavailable_s"] is None or run["unavailable_s"] > bound]
                checks.append((f"{name}: the key was held again within {bound:.1f} s in every "
                               "trial", not late, ", ".join("never" if t is None else
                                                            f"{t:.1f} s" for t in late)))
        idle = [SYSTEMS[system].name for system in fault.systems
                if not all(run["writes"] for run in results[(system, fault.name)])]
        checks.append((f"{fault.name}: every trial's workers wrote to the resource", not idle,
                       ", ".join(idle)))
        died = [name for system in fault.systems for run in results[(system, fault.name)]
                for name in run["died"]]
        checks.append((f"{fault.name}: no worker exited with an error (only a killed holder "
                       "is excused)", not died, ", ".join(died)))
        unfenced = [system for system in fault.systems if SYSTEMS[system].check is None]
        if unfenced and not fault.measured:
            through = sum(found(results[(system, fault.name)], kind) for system in unfenced
                          for kind in COLUMNS)
            checks.append((f"{fault.name}: a system without fencing let something through "
                           "(the fault reached its window)", through > 0, ""))
    for system, row in speeds.items():
        broken = row["random broken"] + row["hot broken"]
        checks.append((f"{SYSTEMS[system].name}: every throughput client ran and reported",
                       not broken, f"{broken} crashed or printed nothing" if broken else ""))
    return checks


def report(directory, faults, results, speeds, trials, seconds):
    """docs/compare.md's text and picture (systems x faults), the checks, and
    `compare: N passed, M failed`."""
    lines = ["# The failure table, measured", "",
             f"Generated by `make compare` from commit {commit_measured()} on "
             f"{time.strftime('%Y-%m-%d')}: {trials} trial(s) per cell, {seconds:.0f} s, "
             f"{os.cpu_count()} cores, everything on one machine. Nothing here is typed by "
             "hand.", ""]
    lines += [f"- {line}" for line in versions()]
    lines += ["", "Each cell, summed over its trials, as the history checker "
              "(`checker/`) counts them: **two holders at once** (grant-to-write intervals "
              "overlapping on one key) / **stale writes accepted** (a token below one the "
              "resource had accepted) / **lost updates** (an accepted write that had not read "
              "its predecessor's value, in the resource's commit order) / **tokens of two "
              "holders** (one token accepted from two grants); then the writes the resource "
              "refused, tokens granted twice (any grants, any keys), the longest time from the "
              "fault to the next grant of its key (**next holder**: for a kill or a lost host "
              "how long the key was unavailable; elsewhere it includes the rest of a holder's "
              "work when its lock held), and the calls that failed with an error "
              "other than the lost service's, by operation and code; — where the fault does "
              "not apply. Three workers on two hot keys; the resource is a PostgreSQL server "
              "of its own that records every write. The histories are in build/compare/run "
              "(`tN.history`, one a trial, in checker/README.md's format).", ""]
    lines.append("| system | " + " | ".join(fault.name for fault in faults) + " |")
    lines.append("|---|" + "---|" * len(faults))
    for system, cls in SYSTEMS.items():
        if not any(system in fault.systems for fault in faults):
            continue
        cells = [cell_text(fault, system, results[(system, fault.name)])
                 if system in fault.systems else "—" for fault in faults]
        lines.append(f"| {cls.name} | " + " | ".join(cells) + " |")
    lines += ["", "The faults:", ""]
    lines += [f"- **{fault.name}** ({fault.work_ms} ms of work per holder): "
              f"{' '.join(type(fault).__doc__.split())}" for fault in faults]
    lines += ["", "Where a system has no cell:", ""]
    lines += [f"- {fault}: {why}" for fault, why in NOT_APPLICABLE.items()]
    lines += ["", "Unavailable after the fault by design (checked: no holder after it):", ""]
    lines += [f"- {SYSTEMS[system].name} / {fault}: {why}"
              for (system, fault), why in UNAVAILABLE_AFTER.items()]
    rounds = max((len(row["random rounds"]) for row in speeds.values()), default=0)
    lines += ["", f"Lock cycles per second (take, release; no work), {THROUGHPUT_CLIENTS} "
              "client processes of the same harness started together, on random keys and on "
              "one hot key (Python clients on the same 2 cores: the ratios mean more than the "
              f"numbers); the median of {rounds} round(s), the systems' order reversed every "
              "other round, and against Redis the median of the rounds' ratios to Redis' rate "
              "in the same round (the lowest and highest in brackets):", "",
              "| system | random keys | one hot key | vs Redis (random, hot) | failed calls "
              "| durable writes per cycle |", "|---|---|---|---|---|---|"]
    redis_row = speeds.get("redis")

    def against_redis(row):
        """The median of the rounds' ratios to Redis' rate in the same round, with the lowest
        and highest when there are several rounds."""
        if not redis_row or 0 in redis_row["random rounds"] + redis_row["hot rounds"]:
            return ""
        ratios = []
        for keys in ("random", "hot"):
            ratio = sorted(mine / redis for mine, redis in
                           zip(row[f"{keys} rounds"], redis_row[f"{keys} rounds"]))
            spread = f" ({ratio[0]:.2f}-{ratio[-1]:.2f})" if len(ratio) > 1 else ""
            ratios.append(f"{statistics.median(ratio):.2f}x{spread}")
        return ", ".join(ratios)
    lines += [f"| {SYSTEMS[system].name} | {row['random']:,.0f} | {row['hot']:,.0f} | "
              f"{against_redis(row)} | {row['random errors'] + row['hot errors']} | "
              f"{row['durable']} |" for system, row in speeds.items()]
    lines += ["", "Durable writes are the lock service's syncs of its log to disk during the "
              "row's runs, per lock cycle: PostgreSQL's `pg_stat_wal.wal_sync` on the lock "
              "server, etcd's WAL fsyncs summed over its members; for Redis, what its "
              "configuration says (none without persistence, one a second with AOF "
              "`everysec`)."]
    lines += ["", "Where this departs from the systems' defaults:", ""]
    lines += [f"- {deviation}" for deviation in deviations()]
    lines += ["", "## The histories", ""] + history_format()
    checks = checks_of(faults, results, speeds)
    lines += ["", "Checks:", ""]
    lines += [f"- {'ok' if ok else 'FAIL'}: {name} {detail or ''}".rstrip()
              for name, ok, detail in checks]
    lines += ["", "![systems x faults](compare.png)"]
    with open(os.path.join(directory, "compare.md"), "w") as out:
        out.write("\n".join(lines) + "\n")
    draw(os.path.join(directory, "compare.png"), faults, results)
    print("\n".join(lines))
    passed = sum(ok for _, ok, _ in checks)
    print(f"compare: {passed} passed, {len(checks) - passed} failed")
    sys.exit(0 if passed == len(checks) else 1)


def draw(path, faults, results):
    """One picture: systems x faults; red where writes the resource cannot undo got through
    (counted as events: one write that broke several rules is one), amber where two holders
    overlapped but the resource refused the older, green where nothing happened, white where
    the fault does not apply; with the longest unavailability."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    systems = [system for system in SYSTEMS if any(system in fault.systems for fault in faults)]
    figure, axes = plt.subplots(figsize=(1.7 * len(faults) + 2.5, 0.6 * len(systems) + 1.4))
    for row, system in enumerate(systems):
        for column, fault in enumerate(faults):
            runs = results[(system, fault.name)]
            if system not in fault.systems:
                colour, text = "#f4f4f4", "—"
            else:
                events = sum(run["events"] or 0 for run in runs)
                if events:
                    colour, text = "#e74c3c", f"{events} through"
                elif found(runs, "two_holders"):
                    colour, text = "#f5b041", f"{found(runs, 'two_holders')} overlapped,\nrefused"
                else:
                    colour, text = "#58d68d", "none"
                text += "\n" + unavailable_text(fault, system, runs)
            axes.add_patch(plt.Rectangle((column, row), 0.96, 0.9, color=colour))
            axes.text(column + 0.48, row + 0.45, text, ha="center", va="center", fontsize=6)
    axes.set_xlim(0, len(faults))
    axes.set_ylim(len(systems), 0)
    axes.set_xticks([c + 0.48 for c in range(len(faults))],
                    [fault.name.replace(" ", "\n", 2) for fault in faults], fontsize=7)
    axes.set_yticks([r + 0.45 for r in range(len(systems))],
                    [SYSTEMS[s].name for s in systems], fontsize=8)
    axes.tick_params(length=0)
    for side in axes.spines.values():
        side.set_visible(False)
    axes.set_title("Writes each lock let through that the resource cannot undo (events summed "
                   "over trials; one write that broke several rules is one), and the longest "
                   "time from the fault to its key's next holder", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    main()
