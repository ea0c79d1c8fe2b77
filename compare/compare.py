"""The failure table, measured: each lock system through the same faults, counting what it
lets through at a resource that records every write (`make compare`; QUICK=1 in `make test`).

    compare.py DIRECTORY [--quick]

Writes DIRECTORY/compare.md (and docs/compare.md from a full run, by `make compare`)."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict

import psycopg2

from services import HERE, Services
from systems import SYSTEMS, TTL_MS

WORKERS = 3
HOT_KEYS = [1, 2]
WARM_S = 1.0


class Trial:
    """Workers of one system on the hot keys, through one fault."""

    def __init__(self, directory, services, system, fault, number):
        self.directory = directory
        self.services, self.system, self.fault = services, system, fault
        self.work_ms = FAULTS[fault][1]
        self.row_base = number * 10
        self.logs = [os.path.join(directory, f"t{number}-w{i}.events") for i in
                     range(WORKERS)]
        with psycopg2.connect(services.resource_dsn) as conn:
            conn.cursor().execute(
                "INSERT INTO counters SELECT %s + key, 0, NULL FROM unnest(%s::int[]) key "
                "ON CONFLICT (id) DO UPDATE SET value = 0, fence = NULL",
                (self.row_base, HOT_KEYS))
        # Each worker reaches the lock services through proxies of its own when the fault
        # partitions one of them.
        self.proxies = [services.proxies(f"t{number}-w{i}") if fault == "partition" else None
                        for i in range(WORKERS)]
        self.workers = [subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), system, f"w{i}",
             json.dumps(services.values(proxied)), str(self.row_base), str(self.work_ms), path,
             *map(str, HOT_KEYS)],
            stdout=subprocess.DEVNULL, stderr=open(path + ".stderr", "ab"),
            stdin=subprocess.DEVNULL) for i, (path, proxied) in
            enumerate(zip(self.logs, self.proxies))]

    def holder(self, timeout=10, since=0):
        """A worker that was granted a key (after `since`) less than a quarter of its work ago
        (so that the fault lands inside its critical section): (process, key, granted_ns)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process, path in zip(self.workers, self.logs):
                last = last_line(path)
                if last and last[0] == "G":
                    granted = int(last[4])
                    if granted > since and time.monotonic_ns() - granted < self.work_ms * 1e6 / 4:
                        return process, int(last[2]), granted
            time.sleep(0.002)
        raise RuntimeError("no worker was seen holding a key")

    def stop(self):
        for proxied in self.proxies:
            if proxied is not None:
                proxied.proxy.restore()
        for process in self.workers:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.terminate()
        for process in self.workers:
            process.wait(timeout=10)
        for proxied in self.proxies:
            if proxied is not None:
                proxied.proxy.process.terminate()
                proxied.proxy.process.wait(timeout=10)


def last_line(path):
    try:
        with open(path, "rb") as events:
            lines = events.read().splitlines()
        return lines[-1].decode().split() if lines else None
    except FileNotFoundError:
        return None


# The faults: each takes the trial and returns what it measured (the time to the next grant).
def paused(trial):
    """The GC-pause case: the holder is stopped for 2 x TTL inside its critical section, then
    resumes and writes."""
    process, key, _ = trial.holder()
    process.send_signal(signal.SIGSTOP)
    time.sleep(2 * TTL_MS / 1000)
    process.send_signal(signal.SIGCONT)
    time.sleep(trial.work_ms / 1000 * 3)
    return {}


def killed(trial):
    """kill -9 of the holder: how long until another worker holds its key."""
    process, key, _ = trial.holder()
    process.send_signal(signal.SIGKILL)
    killed_at = time.monotonic_ns()
    time.sleep(2 * TTL_MS / 1000 + 1)
    grants = [int(line[4]) for path in trial.logs for line in read_lines(path)
              if line[0] == "G" and int(line[2]) == key and int(line[4]) > killed_at]
    return {"next_grant_s": (min(grants) - killed_at) / 1e9 if grants else None}


def restarted(trial):
    """The lock service restarted while a lock is held: Redis without persistence (for
    Redlock, one of the holder's nodes, below), one etcd member (kill -9, started again on its
    data), the PostgreSQL lock server crashed (immediate stop) and started again."""
    services = trial.services
    if trial.system == "redlock":
        # Redlock's documented weakness: a holder with a bare majority (two nodes down while
        # it locks, then back empty), one of whose three nodes restarts and forgets it.
        nodes = services.redlock
        for node in nodes[3:]:
            node.kill()
        trial.holder(since=time.monotonic_ns())
        for node in nodes[3:]:
            node.start()
        nodes[0].restart()
        time.sleep(2 * TTL_MS / 1000 + 1)
        return {}
    trial.holder()
    if trial.system == "redis":
        services.redis.restart()
    elif trial.system == "etcd":
        services.etcd.restart(0)
    else:
        services.crash_lock_server()
    time.sleep(2 * TTL_MS / 1000 + 1)
    return {}


def partition(trial):
    """The holder cut off from its lock service (its own proxies blackholed: no byte passes,
    no connection is reset) for 3 x TTL, while the resource stays reachable; it goes on with
    its work, which outlasts the TTL, and writes."""
    process, key, _ = trial.holder()
    index = trial.workers.index(process)
    trial.proxies[index].proxy.blackhole()
    time.sleep(3 * TTL_MS / 1000)
    trial.proxies[index].proxy.restore()
    time.sleep(1)
    return {}


# Each fault with the holders' work time (ms): a restart must fit inside a critical section,
# a partitioned holder's work must outlast the TTL.
FAULTS = {"holder paused past its TTL": (paused, 300), "holder killed": (killed, 300),
          "lock service restart": (restarted, 3000), "partition": (partition, 2500)}


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
    tokens = Counter(int(line[3]) for path in trial.logs for line in read_lines(path)
                     if line[0] == "G" and line[3] != "None")
    return {"writes": len(writes), "two_holders": overlaps, "stale_accepted": stale,
            "lost_updates": lost, "tokens_repeated": sum(1 for n in tokens.values() if n > 1),
            **measured}


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
            counts = [client.communicate(timeout=seconds + 60)[0].split() or ["0", "1"]
                      for client in clients]
            rows[system][keys] = sum(int(c[0]) for c in counts) / seconds
            rows[system][f"{keys} errors"] = sum(int(c[1]) for c in counts)
        print(f"{SYSTEMS[system].name}: {rows[system]['random']:.0f} cycles/s on random keys, "
              f"{rows[system]['hot']:.0f} on one hot key", flush=True)
    return rows


def main():
    directory = os.path.abspath(sys.argv[1])
    quick = "--quick" in sys.argv[2:]
    trials = 1 if quick else 3
    os.makedirs(directory, exist_ok=True)
    services = Services(directory)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = defaultdict(list)
    started = time.monotonic()
    try:
        services.start()
        number = 0
        for fault_name, (fault, _) in FAULTS.items():
            for system in SYSTEMS:
                for _ in range(trials):
                    number += 1
                    trial = Trial(directory, services, system, fault_name, number)
                    try:
                        time.sleep(WARM_S)
                        measured = fault(trial)
                    finally:
                        trial.stop()
                    result = analyse(trial, measured)
                    results[(system, fault_name)].append(result)
                    print(f"{SYSTEMS[system].name} / {fault_name}: {result}", flush=True)
        speeds = throughput(services, 2 if quick else 5)
    finally:
        services.stop()
    report(directory, results, speeds, trials, time.monotonic() - started)


VIOLATIONS = ("two_holders", "stale_accepted", "lost_updates", "tokens_repeated")
# What a resource cannot undo; two holders at once happen with any lease, fenced_lock's too.
HARMFUL = ("stale_accepted", "lost_updates", "tokens_repeated")
# Where the comparison departs from each system's documented defaults.
DEVIATIONS = [
    "Every TTL is 1 s (users configure seconds to minutes), so that a trial lasts seconds; "
    "etcd grants a 1 s lease as 2 s.",
    "Redlock's Redis clients do not retry and give up on a node after 0.5 s (redis-py's "
    "default retries make one acquire with a node down outlast the whole TTL); the single "
    "Redis uses redis-py's defaults.",
    "The token systems claim the row with their token before reading it (fenced_update with "
    "no changes; by hand and for etcd, the guarded UPDATE of the fence alone), so that an "
    "older holder's write after a newer holder's read is refused: fencing the write alone "
    "lets a read-modify-write lose the newer holder's update when the older one writes first.",
    "The guarded UPDATE is `WHERE fence IS NULL OR fence <= token` (the seeds write `<`), so "
    "that a holder's write passes its own claim.",
    "Redlock's restart trial follows the documented weakness: two of the five nodes are down "
    "while the holder locks (it holds a bare majority), come back empty, and one of its three "
    "nodes restarts without persistence.",
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


def report(directory, results, speeds, trials, seconds):
    """docs/compare.md's text and picture (systems x faults), the checks, and
    `compare: N passed, M failed`."""
    faults = list(FAULTS)
    # A fault reached its window when a system without fencing let something through; a kill
    # is measured by the time to the next grant instead.
    reached = {fault: fault == "holder killed" or any(
        any(cell_counts(results[(system, fault)]).values())
        for system, cls in SYSTEMS.items() if cls.check is None) for fault in faults}
    lines = [f"# The failure table, measured", "",
             f"Generated by `make compare` on {time.strftime('%Y-%m-%d')}: {trials} trial(s) per "
             f"cell, {seconds:.0f} s, 2 cores, everything on one machine. Nothing here is typed "
             "by hand.", ""]
    lines += [f"- {line}" for line in versions()]
    lines += ["", "Each cell, summed over its trials: **two holders at once** (grant-to-write "
              "intervals overlapping on one key) / **stale writes accepted** (a write that "
              "landed after a newer holder's) / **lost updates** (accepted increments the "
              "counter does not show) / **tokens repeated**; after a kill, the longest time "
              "until another worker held the key. Three workers on two hot keys; the resource "
              "is a PostgreSQL server of its own that records every write.", ""]
    lines.append("| system | " + " | ".join(faults) + " |")
    lines.append("|---|" + "---|" * len(faults))
    for system, cls in SYSTEMS.items():
        cells = []
        for fault in faults:
            runs = results[(system, fault)]
            counts = " / ".join(str(n) for n in cell_counts(runs).values())
            grants = [r["next_grant_s"] for r in runs if r.get("next_grant_s") is not None]
            if grants:
                counts += f"; next grant {max(grants):.1f} s"
            if not reached[fault]:
                counts += " (fault missed its window)"
            cells.append(counts)
        lines.append(f"| {cls.name} | " + " | ".join(cells) + " |")
    lines += ["", f"Lock cycles per second (take, release; no work), {THROUGHPUT_CLIENTS} "
              "client processes of the same harness, on random keys and on one hot key (Python "
              "clients on the same 2 cores: the ratios mean more than the numbers):", "",
              "| system | random keys | one hot key | failed calls |", "|---|---|---|---|"]
    lines += [f"| {SYSTEMS[system].name} | {row['random']:,.0f} | {row['hot']:,.0f} | "
              f"{row['random errors'] + row['hot errors']} |" for system, row in speeds.items()]
    lines += ["", "Where this departs from the systems' defaults:", ""]
    lines += [f"- {deviation}" for deviation in DEVIATIONS]
    checks = []
    for system, cls in SYSTEMS.items():
        if system.startswith("fenced"):
            for fault in faults:
                bad = {v: n for v, n in cell_counts(results[(system, fault)]).items()
                       if v in HARMFUL}
                checks.append((f"{cls.name} / {fault}: no stale write, lost update or "
                               f"repeated token", not any(bad.values()), bad))
    for fault in faults:
        if fault != "holder killed":
            checks.append((f"{fault}: a system without fencing let something through (the "
                           f"fault reached its window)", reached[fault], ""))
    lines += ["", "Checks:", ""]
    lines += [f"- {'ok' if ok else 'FAIL'}: {name} {detail or ''}".rstrip()
              for name, ok, detail in checks]
    lines += ["", "![systems x faults](compare.png)"]
    with open(os.path.join(directory, "compare.md"), "w") as out:
        out.write("\n".join(lines) + "\n")
    draw(os.path.join(directory, "compare.png"), results, faults, reached)
    print("\n".join(lines))
    passed = sum(ok for _, ok, _ in checks)
    print(f"compare: {passed} passed, {len(checks) - passed} failed")
    sys.exit(0 if passed == len(checks) else 1)


def draw(path, results, faults, reached):
    """One picture: systems x faults; red where something the resource cannot undo got
    through, amber where two holders overlapped but the resource refused the stale one,
    green where nothing happened, grey where the fault missed its window."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    systems = list(SYSTEMS)
    figure, axes = plt.subplots(figsize=(2.2 * len(faults) + 2.5, 0.6 * len(systems) + 1.2))
    for row, system in enumerate(systems):
        for column, fault in enumerate(faults):
            counts = cell_counts(results[(system, fault)])
            harmful = sum(counts[v] for v in HARMFUL)
            if not reached[fault]:
                colour, text = "#cccccc", "missed"
            elif harmful:
                colour, text = "#e74c3c", f"{harmful} through"
            elif counts["two_holders"]:
                colour, text = "#f5b041", f"{counts['two_holders']} overlapped, refused"
            else:
                colour, text = "#58d68d", "none"
            grants = [r["next_grant_s"] for r in results[(system, fault)]
                      if r.get("next_grant_s") is not None]
            if grants:
                text += f"\nnext holder after {max(grants):.1f} s"
            axes.add_patch(plt.Rectangle((column, row), 0.96, 0.9, color=colour))
            axes.text(column + 0.48, row + 0.45, text, ha="center", va="center", fontsize=8)
    axes.set_xlim(0, len(faults))
    axes.set_ylim(len(systems), 0)
    axes.set_xticks([c + 0.48 for c in range(len(faults))], faults, fontsize=8)
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
