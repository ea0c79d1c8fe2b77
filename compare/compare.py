"""The failure table, measured: each lock system through the same faults, counting what it
lets through at a resource that records every write (`make compare`; QUICK=1 in `make test`).

    compare.py DIRECTORY [--quick] [--only NAME]

--only NAME runs the faults whose names contain NAME, without the throughput row.

Writes DIRECTORY/compare.md (and docs/compare.md from a full run, by `make compare`)."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict

import psycopg2

from services import HERE, Clock, Proxies, Services

# The history checker (checker/), built by `make compare`.
CHECKER = os.path.join(HERE, "..", "target", "checker", "debug", "check-histories")
# What the checker counts that fencing allows: a holder whose lease ended while it worked may
# still write before its successor reaches the resource (the successor then reads that
# write); what fencing must prevent is any other kind.
CHECKER_OVERLAPS = ("two_holders",)
from systems import SYSTEMS, TTL_MS

WORKERS = 3
HOT_KEYS = [1, 2]
# The rest of the application, in the failover trials: keys no hot-key worker takes.
OTHER_KEYS = list(range(100, 164))
WARM_S = 0.5
PG_SYSTEMS = ("by-hand", "fenced-xact", "fenced-lease", "fenced-leader")


class Trial:
    """Workers of one system on the hot keys, through one fault."""

    def __init__(self, directory, services, system, fault, number):
        self.directory, self.number = directory, number
        self.services, self.system, self.fault = services, system, fault
        self.work_ms = fault.work_ms
        self.row_base = number * 10
        self.logs = [os.path.join(directory, f"t{number}-w{i}.events") for i in
                     range(WORKERS)]
        with psycopg2.connect(services.resource_dsn) as conn:
            conn.cursor().execute(
                "INSERT INTO counters SELECT %s + key, 0, NULL FROM unnest(%s::int[]) key "
                "ON CONFLICT (id) DO UPDATE SET value = 0, fence = NULL",
                (self.row_base, HOT_KEYS))
        conn.close()
        fault.prepare(self)
        self.workers = [self.spawn(f"w{i}", str(self.row_base), self.work_ms, path, HOT_KEYS,
                                   fault.endpoints(self, i))
                        for i, path in enumerate(self.logs)]
        self.token_logs = list(self.logs)
        if fault.background:
            self.token_logs.append(os.path.join(directory, f"t{number}-rest.events"))
            self.workers.append(self.spawn("rest", "none", 0, self.token_logs[-1], OTHER_KEYS,
                                           fault.endpoints(self, None)))

    def spawn(self, name, row_base, work_ms, path, keys, endpoints):
        values = {**self.services.values(), **endpoints}
        return subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), self.system, name,
             json.dumps(values), row_base, str(work_ms), path, *map(str, keys)],
            stdout=subprocess.DEVNULL, stderr=open(path + ".stderr", "ab"),
            stdin=subprocess.DEVNULL)

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

    def wait_out_work(self):
        """Until the holders at the fault have written and their successors hold the key
        (`stop` lets every worker finish the cycle it is in, write included)."""
        time.sleep(self.work_ms / 1000 + 1.5)

    def stop(self):
        for process in self.workers:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.terminate()
        for process in self.workers:
            process.wait(timeout=10)
        # A worker that raised stopped measuring (its traceback is in its .stderr); SIGKILL
        # is the holder-killed fault's own.
        self.died = [os.path.basename(path) for process, path in zip(self.workers,
                                                                     self.token_logs)
                     if process.returncode not in (0, -signal.SIGKILL)]
        self.fault.clean_up(self)


def last_grant_or_write(path):
    for line in reversed(read_lines(path)):
        if line[0] in "GW":
            return line
    return None


class Fault:
    """One column of the table: the systems it applies to, the holders' work time (ms), what
    shows that it reached its window, whether the rest of the application draws tokens on
    other keys meanwhile, and what it does to a trial."""

    work_ms = 300
    systems = tuple(SYSTEMS)
    # "unfenced": a system without fencing let something through; "overlap": two holders at
    # once in some cell (no system without fencing applies); "next grant": measured instead.
    reach = "unfenced"
    background = False

    def prepare(self, trial):
        """Before the workers start."""

    def endpoints(self, trial, worker):
        """What worker `worker` (None: the rest of the application) reaches instead of the
        shared services."""
        return {}

    def run(self, trial):
        """The fault itself; returns what it measured."""
        return {}

    def clean_up(self, trial):
        """After the workers stopped: the services as the next trial expects them."""


class Paused(Fault):
    """The GC-pause case: the holder is stopped for 2 x TTL inside its critical section, then
    resumes and writes."""

    name = "holder paused past its TTL"

    def run(self, trial):
        process, _, _ = trial.holder()
        process.send_signal(signal.SIGSTOP)
        time.sleep(2 * TTL_MS / 1000)
        process.send_signal(signal.SIGCONT)
        time.sleep(trial.work_ms / 1000 * 3)
        return {}


class Killed(Fault):
    """kill -9 of the holder: how long until another worker holds its key."""

    name, reach = "holder killed", "next grant"

    @staticmethod
    def bound_s(system):
        """How soon another worker must hold the key: the system's lease (etcd grants the
        1 s TTL as 2 s; a session or transaction lock ends with its connection, at once)
        and a margin for the next worker's retry; a trial without a grant by then fails."""
        return (2 if system == "etcd" else TTL_MS / 1000) + 1.5

    def run(self, trial):
        process, key, _ = trial.holder()
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic_ns()
        time.sleep(self.bound_s("etcd") + 0.5)
        grants = [int(line[4]) for path in trial.logs for line in read_lines(path)
                  if line[0] == "G" and int(line[2]) == key and int(line[4]) > killed_at]
        return {"next_grant_s": (min(grants) - killed_at) / 1e9 if grants else None}


def bare_majority(trial):
    """Redlock's documented weakness, set up: two of the five nodes are down while a worker
    locks, so that it holds a bare majority of three, and come back empty."""
    nodes = trial.services.redlock
    for node in nodes[3:]:
        node.kill()
    trial.holder(since=time.monotonic_ns())
    for node in nodes[3:]:
        node.start()


class Restarted(Fault):
    """The lock service restarted while a lock is held: Redis without persistence (for
    Redlock, one of a bare majority's nodes), one etcd member (kill -9, started again on its
    data), the PostgreSQL lock server crashed (immediate stop) and started again. The work
    outlasts the restart."""

    name, work_ms = "lock service restart", 3000

    def run(self, trial):
        services = trial.services
        if trial.system == "redlock":
            bare_majority(trial)
            services.redlock[0].restart()
        else:
            trial.holder()
            if trial.system == "redis":
                services.redis.restart()
            elif trial.system == "etcd":
                services.etcd.restart(0)
            else:
                services.crash_lock_server()
        trial.wait_out_work()
        return {}


class Failover(Fault):
    """The primary lost while a lock is held: Redis' primary killed and its replica promoted
    by the Sentinels; etcd's leader killed; the PostgreSQL primary crashed and its standby
    promoted. Asynchronous replication lags at the worst moment: the replica's (standby's)
    link is held back from the moment the holder takes its lock, while the rest of the
    application goes on taking other keys. The holders' work outlasts the failover."""

    name, work_ms, background = "failover", 4000, True
    systems = ("redis", "etcd") + PG_SYSTEMS
    synchronous = False

    def prepare(self, trial):
        name, services = f"t{trial.number}", trial.services
        trial.replicated = (services.redis_with_sentinels(name) if trial.system == "redis" else
                            services.etcd_leader() if trial.system == "etcd" else
                            services.postgres_with_standby(name, self.synchronous))

    def endpoints(self, trial, worker):
        return trial.replicated.values()

    def run(self, trial):
        if not self.synchronous:
            trial.replicated.hold_back()
        trial.holder(since=time.monotonic_ns())
        time.sleep(0.5)
        trial.replicated.fail()
        trial.wait_out_work()
        return {}

    def clean_up(self, trial):
        trial.replicated.stop()


class SynchronousFailover(Failover):
    """The PostgreSQL primary crashed while a lock is held, its synchronous standby
    promoted."""

    name, synchronous, reach = "failover to a synchronous standby", True, "overlap"
    systems, work_ms = PG_SYSTEMS, 2000


class ClockJump(Fault):
    """A lock server's wall clock jumps forward a minute (libfaketime) while a lock is held:
    the single Redis, or one of a Redlock bare majority's nodes."""

    name, work_ms = "clock jump", 3000
    systems = ("redis", "redlock")

    def prepare(self, trial):
        trial.clock = Clock(trial.directory, f"t{trial.number}")
        trial.skewed = (trial.services.redis if trial.system == "redis"
                        else trial.services.redlock[0])
        trial.skewed.restart(trial.clock)

    def run(self, trial):
        if trial.system == "redlock":
            bare_majority(trial)
        else:
            trial.holder()
        trial.clock.jump(60)
        trial.wait_out_work()
        return {}

    def clean_up(self, trial):
        trial.skewed.restart()


class Partitioned(Fault):
    """The holder cut off from its lock service (its own proxies blackholed: no byte passes,
    no connection is reset) for 3 x TTL, while the resource stays reachable; it goes on with
    its work, which outlasts the TTL, and writes."""

    name, work_ms = "partition", 2500

    def prepare(self, trial):
        trial.proxies = [Proxies(trial.services, f"t{trial.number}-w{i}")
                         for i in range(WORKERS)]

    def endpoints(self, trial, worker):
        return trial.proxies[worker].values()

    def run(self, trial):
        process, _, _ = trial.holder()
        proxy = trial.proxies[trial.workers.index(process)].proxy
        proxy.blackhole()
        time.sleep(3 * TTL_MS / 1000)
        proxy.restore()
        time.sleep(1)
        return {}

    def clean_up(self, trial):
        for proxied in trial.proxies:
            proxied.proxy.stop()


FAULTS = [Paused(), Killed(), Restarted(), Failover(), SynchronousFailover(), ClockJump(),
          Partitioned()]
# Why a system has no cell in a column.
NOT_APPLICABLE = {
    "failover": "Redlock's five nodes are independent masters: there is nothing to fail "
                "over to.",
    "failover to a synchronous standby": "Redis replicates asynchronously (WAIT narrows the "
                                         "window, it does not make a failover wait); etcd's "
                                         "Raft log is the failover column's own.",
    "clock jump": "etcd times its leases on Go's monotonic clock; PostgreSQL's session and "
                  "transaction locks have no time in them. fenced_lock's lease expires on the "
                  "database clock, so a jump there ends it early, as a pause does: the "
                  "resource refuses the late holder as in the pause column (not run here).",
}


def read_lines(path):
    try:
        with open(path) as events:
            return [line.split() for line in events if line.strip()]
    except FileNotFoundError:
        return []


def analyse(trial, measured):
    """Two holders at once (overlapping grant-to-write intervals on one key), stale writes
    accepted (a write accepted after a later holder's), lost updates (accepted increments the
    counter does not show) and tokens repeated, from the resource's own record."""
    with psycopg2.connect(trial.services.resource_dsn) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT id, worker, token, granted_ns, wrote_ns, accepted FROM writes "
                       "WHERE id >= %s AND id < %s ORDER BY seq",
                       (trial.row_base, trial.row_base + 10))
        writes = cursor.fetchall()
        cursor.execute("SELECT id, value FROM counters WHERE id >= %s AND id < %s",
                       (trial.row_base, trial.row_base + 10))
        final = dict(cursor.fetchall())
    by_row = defaultdict(list)
    for write in writes:
        by_row[write[0]].append(write)
    overlaps = stale = lost = 0
    for row, row_writes in by_row.items():
        intervals = sorted((w[3], w[4], w[1]) for w in row_writes)
        for i, (start, end, worker) in enumerate(intervals):
            if any(other < end and o_worker != worker for other, _, o_worker in intervals[i + 1:]):
                overlaps += 1
        latest_grant = None
        for _, _, _, granted, _, accepted in row_writes:
            if not accepted:
                continue
            if latest_grant is not None and granted < latest_grant:
                stale += 1
            latest_grant = granted if latest_grant is None else max(latest_grant, granted)
        lost += sum(1 for w in row_writes if w[5]) - final.get(row, 0)
    tokens = Counter(int(line[3]) for path in trial.token_logs for line in read_lines(path)
                     if line[0] == "G" and line[3] != "None")
    return {"writes": len(writes), "died": trial.died, "two_holders": overlaps,
            "stale_accepted": stale, "lost_updates": lost,
            "tokens_repeated": sum(1 for n in tokens.values() if n > 1),
            **measured}


def check_history(trial):
    """The trial's history (its workers' operations and the resource's accepted writes in
    commit order, in checker/README.md's format) in DIRECTORY/tN.history, read by the checker:
    its violations by kind, or None when it could not read the history."""
    with psycopg2.connect(trial.services.resource_dsn) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT seq, id - %s, worker, token, granted_ns, read_value FROM writes "
                       "WHERE id >= %s AND id < %s AND accepted ORDER BY seq",
                       (trial.row_base, trial.row_base, trial.row_base + 10))
        commits = cursor.fetchall()
    conn.close()
    path = os.path.join(trial.directory, f"t{trial.number}.history")
    with open(path, "w") as history:
        for log in trial.token_logs:
            try:
                with open(log.rsplit(".", 1)[0] + ".history") as worker:
                    history.writelines(worker)
            except FileNotFoundError:
                pass
        for seq, key, worker, token, granted_ns, read in commits:
            history.write(json.dumps({"type": "commit", "f": "write", "key": str(key),
                                      "seq": seq, "worker": worker, "token": token,
                                      "grant": granted_ns, "read": read,
                                      "value": read + 1}) + "\n")
    checked = subprocess.run([CHECKER, "--report", path], capture_output=True, text=True)
    if checked.returncode != 0:
        print(f"checker: {path}: {checked.stderr.strip()}", flush=True)
        return None
    return json.loads(checked.stdout)["violations"]


THROUGHPUT_CLIENTS = 8


def throughput(services, seconds):
    """Lock cycles per second per system, 8 client processes, random keys and one hot key."""
    rows = {}
    for system in SYSTEMS:
        rows[system] = {}
        for keys in ("random", "hot"):
            clients = [subprocess.Popen(
                [sys.executable, os.path.join(HERE, "throughput.py"), system,
                 json.dumps(services.values()), str(seconds), keys],
                stdout=subprocess.PIPE, text=True) for _ in range(THROUGHPUT_CLIENTS)]
            counts = [client.communicate(timeout=seconds + 60)[0].split() for client in clients]
            # A client that crashed or printed nothing measured nothing: the row fails.
            rows[system][f"{keys} broken"] = sum(
                1 for client, count in zip(clients, counts) if client.returncode != 0 or
                len(count) != 2)
            counts = [count if len(count) == 2 else ["0", "0"] for count in counts]
            rows[system][keys] = sum(int(c[0]) for c in counts) / seconds
            rows[system][f"{keys} errors"] = sum(int(c[1]) for c in counts)
        print(f"{SYSTEMS[system].name}: {rows[system]['random']:.0f} cycles/s on random keys, "
              f"{rows[system]['hot']:.0f} on one hot key", flush=True)
    return rows


def main():
    directory = os.path.abspath(sys.argv[1])
    quick = "--quick" in sys.argv[2:]
    # --only NAME: the faults whose names contain NAME, and no throughput row (to iterate).
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    faults = [fault for fault in FAULTS if only is None or only in fault.name]
    trials = 1 if quick else 3
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
                    finally:
                        trial.stop()
                    result = analyse(trial, measured)
                    result["checker"] = check_history(trial)
                    results[(system, fault.name)].append(result)
                    print(f"{SYSTEMS[system].name} / {fault.name}: {result}", flush=True)
        speeds = throughput(services, 2 if quick else 4) if only is None else {}
    finally:
        services.stop()
    report(directory, faults, results, speeds, trials, time.monotonic() - started)


VIOLATIONS = ("two_holders", "stale_accepted", "lost_updates", "tokens_repeated")
# What a resource cannot undo; two holders at once happen with any lease, fenced_lock's too.
HARMFUL = ("stale_accepted", "lost_updates", "tokens_repeated")
# Where the comparison departs from each system's documented defaults.
DEVIATIONS = [
    "Every TTL is 1 s (users configure seconds to minutes), so that a trial lasts seconds; "
    "etcd grants a 1 s lease as 2 s.",
    "Redlock's Redis clients do not retry and give up on a node after 0.5 s (redis-py's "
    "default retries make one acquire with a node down outlast the whole TTL); the single "
    "Redis uses redis-py's defaults. pottery allows 3 extensions of a Redlock by default; "
    "here, any number, so that a holder can renew through its work.",
    "Leases are renewed every third of the TTL by a watchdog thread in the worker (as "
    "Redisson's watchdog and etcd's keep-alive do); a failed renewal does not stop the work, "
    "since a check before the write cannot close the window (a pause can fall between the "
    "check and the write).",
    "The token systems claim the row with their token before reading it (fenced_update with "
    "no changes; by hand and for etcd, the guarded UPDATE of the fence alone), so that an "
    "older holder's write after a newer holder's read is refused: fencing the write alone "
    "lets a read-modify-write lose the newer holder's update when the older one writes first.",
    "The guarded UPDATE is `WHERE fence IS NULL OR fence <= token` (the seeds write `<`), so "
    "that a holder's write passes its own claim.",
    "Redlock's restart and clock-jump trials follow its documented weakness: two of the five "
    "nodes are down while the holder locks (it holds a bare majority), come back empty, and "
    "then one of its three nodes restarts without persistence, or its clock jumps.",
    "The asynchronous failover holds the replica's (standby's) replication back from the "
    "moment the holder takes its lock (a proxy on the link stops passing bytes), as lag at "
    "the worst moment; on one machine replication is otherwise too fast to lag. A fourth "
    "worker takes other keys meanwhile, as the rest of an application would. The harness "
    "promotes the PostgreSQL standby at once after the crash (an HA manager would wait for "
    "its own timeout first); the Sentinels decide for Redis (down-after 1 s).",
]


def versions():
    def first_line(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()[0]
        except (OSError, IndexError):
            return "?"
    from importlib.metadata import version
    return [first_line(["redis-server", "--version"]), first_line(["etcd", "--version"]),
            first_line(["/usr/lib/postgresql/15/bin/postgres", "--version"]),
            "clients: " + ", ".join(f"{name} {version(name)}" for name in
                                    ("redis", "pottery", "etcd3gw", "psycopg2-binary"))]


def cell_counts(runs):
    return {v: sum(r[v] for r in runs) for v in VIOLATIONS}


def reached_window(fault, results):
    """Whether a fault reached its window: a system without fencing let something through, or
    where none applies, two holders overlapped; a kill is measured by the time to the next
    grant instead."""
    if fault.reach == "next grant":
        return True
    if fault.reach == "overlap":
        return any(cell_counts(results[(system, fault.name)])["two_holders"]
                   for system in fault.systems)
    return any(any(cell_counts(results[(system, fault.name)]).values())
               for system in fault.systems if SYSTEMS[system].check is None)


def report(directory, faults, results, speeds, trials, seconds):
    """docs/compare.md's text and picture (systems x faults), the checks, and
    `compare: N passed, M failed`."""
    reached = {fault.name: reached_window(fault, results) for fault in faults}
    lines = ["# The failure table, measured", "",
             f"Generated by `make compare` on {time.strftime('%Y-%m-%d')}: {trials} trial(s) per "
             f"cell, {seconds:.0f} s, 2 cores, everything on one machine. Nothing here is typed "
             "by hand.", ""]
    lines += [f"- {line}" for line in versions()]
    lines += ["", "Each cell, summed over its trials: **two holders at once** (grant-to-write "
              "intervals overlapping on one key) / **stale writes accepted** (a write that "
              "landed after a newer holder's) / **lost updates** (accepted increments the "
              "counter does not show) / **tokens repeated**; after a kill, the longest time "
              "until another worker held the key; — where the fault does not apply. Three "
              "workers on two hot keys; the resource is a PostgreSQL server of its own that "
              "records every write.", ""]
    lines.append("| system | " + " | ".join(fault.name for fault in faults) + " |")
    lines.append("|---|" + "---|" * len(faults))
    for system, cls in SYSTEMS.items():
        cells = []
        for fault in faults:
            if system not in fault.systems:
                cells.append("—")
                continue
            runs = results[(system, fault.name)]
            counts = " / ".join(str(n) for n in cell_counts(runs).values())
            grants = [r["next_grant_s"] for r in runs if r.get("next_grant_s") is not None]
            if grants:
                counts += f"; next grant {max(grants):.1f} s"
            if not reached[fault.name]:
                counts += " (fault missed its window)"
            cells.append(counts)
        lines.append(f"| {cls.name} | " + " | ".join(cells) + " |")
    lines += ["", "The faults:", ""]
    lines += [f"- **{fault.name}** ({fault.work_ms} ms of work per holder): "
              f"{' '.join(type(fault).__doc__.split())}" for fault in faults]
    lines += ["", "Where a system has no cell:", ""]
    lines += [f"- {fault}: {why}" for fault, why in NOT_APPLICABLE.items()]
    lines += ["", f"Lock cycles per second (take, release; no work), {THROUGHPUT_CLIENTS} "
              "client processes of the same harness, on random keys and on one hot key (Python "
              "clients on the same 2 cores: the ratios mean more than the numbers):", "",
              "| system | random keys | one hot key | failed calls |", "|---|---|---|---|"]
    lines += [f"| {SYSTEMS[system].name} | {row['random']:,.0f} | {row['hot']:,.0f} | "
              f"{row['random errors'] + row['hot errors']} |" for system, row in speeds.items()]
    lines += ["", "Where this departs from the systems' defaults:", ""]
    lines += [f"- {deviation}" for deviation in DEVIATIONS]
    checks = []
    for fault in faults:
        for system in fault.systems:
            if system.startswith("fenced"):
                bad = {v: n for v, n in cell_counts(results[(system, fault.name)]).items()
                       if v in HARMFUL}
                checks.append((f"{SYSTEMS[system].name} / {fault.name}: no stale write, lost "
                               f"update or repeated token", not any(bad.values()), bad))
        for system in fault.systems:
            runs = results[(system, fault.name)]
            unread = sum(run["checker"] is None for run in runs)
            checks.append((f"{SYSTEMS[system].name} / {fault.name}: the checker read every "
                           "trial's history", not unread, f"{unread} unread" if unread else ""))
            if system.startswith("fenced"):
                found = Counter()
                for run in runs:
                    found.update({kind: n for kind, n in (run["checker"] or {}).items()
                                  if kind not in CHECKER_OVERLAPS})
                checks.append((f"{SYSTEMS[system].name} / {fault.name}: the checker finds no "
                               "repeated or falling token, stale write, token of two holders or "
                               "lost update in the histories", not found, dict(found)))
        idle = [SYSTEMS[system].name for system in fault.systems
                if not all(run["writes"] for run in results[(system, fault.name)])]
        checks.append((f"{fault.name}: every trial's workers wrote to the resource", not idle,
                       ", ".join(idle)))
        died = [name for system in fault.systems for run in results[(system, fault.name)]
                for name in run["died"]]
        checks.append((f"{fault.name}: no worker died of an error", not died, ", ".join(died)))
        if fault.reach == "next grant":
            for system in fault.systems:
                grants = [run.get("next_grant_s") for run in results[(system, fault.name)]]
                bound = fault.bound_s(system)
                late = [grant for grant in grants if grant is None or grant > bound]
                checks.append((f"{SYSTEMS[system].name} / {fault.name}: the key was held "
                               f"again within {bound:.1f} s in every trial", not late,
                               ", ".join("never" if g is None else f"{g:.1f} s" for g in late)))
        else:
            how = ("a system without fencing let something through" if fault.reach ==
                   "unfenced" else "two holders overlapped")
            checks.append((f"{fault.name}: {how} (the fault reached its window)",
                           reached[fault.name], ""))
    for system, row in speeds.items():
        broken = row["random broken"] + row["hot broken"]
        checks.append((f"{SYSTEMS[system].name}: every throughput client ran and reported",
                       not broken, f"{broken} crashed or printed nothing" if broken else ""))
    lines += ["", "Checks:", ""]
    lines += [f"- {'ok' if ok else 'FAIL'}: {name} {detail or ''}".rstrip()
              for name, ok, detail in checks]
    lines += ["", "![systems x faults](compare.png)"]
    with open(os.path.join(directory, "compare.md"), "w") as out:
        out.write("\n".join(lines) + "\n")
    draw(os.path.join(directory, "compare.png"), faults, results, reached)
    print("\n".join(lines))
    passed = sum(ok for _, ok, _ in checks)
    print(f"compare: {passed} passed, {len(checks) - passed} failed")
    sys.exit(0 if passed == len(checks) else 1)


def draw(path, faults, results, reached):
    """One picture: systems x faults; red where something the resource cannot undo got
    through, amber where two holders overlapped but the resource refused the stale one,
    green where nothing happened, grey where the fault missed its window, white where it does
    not apply."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    systems = list(SYSTEMS)
    figure, axes = plt.subplots(figsize=(1.9 * len(faults) + 2.5, 0.6 * len(systems) + 1.4))
    for row, system in enumerate(systems):
        for column, fault in enumerate(faults):
            runs = results[(system, fault.name)]
            counts = cell_counts(runs)
            harmful = sum(counts[v] for v in HARMFUL)
            if system not in fault.systems:
                colour, text = "#f4f4f4", "—"
            elif not reached[fault.name]:
                colour, text = "#cccccc", "missed"
            elif harmful:
                colour, text = "#e74c3c", f"{harmful} through"
            elif counts["two_holders"]:
                colour, text = "#f5b041", f"{counts['two_holders']} overlapped,\nrefused"
            else:
                colour, text = "#58d68d", "none"
            grants = [r["next_grant_s"] for r in runs if r.get("next_grant_s") is not None]
            if grants:
                text += f"\nnext holder {max(grants):.1f} s"
            axes.add_patch(plt.Rectangle((column, row), 0.96, 0.9, color=colour))
            axes.text(column + 0.48, row + 0.45, text, ha="center", va="center", fontsize=7)
    axes.set_xlim(0, len(faults))
    axes.set_ylim(len(systems), 0)
    axes.set_xticks([c + 0.48 for c in range(len(faults))],
                    [fault.name.replace(" ", "\n", 2) for fault in faults], fontsize=7)
    axes.set_yticks([r + 0.45 for r in range(len(systems))],
                    [SYSTEMS[s].name for s in systems], fontsize=8)
    axes.tick_params(length=0)
    for side in axes.spines.values():
        side.set_visible(False)
    axes.set_title("What each lock lets through to the resource", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    main()
