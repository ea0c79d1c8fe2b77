"""`make bench CURVES=1`: how fenced_lock's cost grows with its load, beside its anchor (the
bare advisory lock, or the SQL a user would write by hand) at every point of every curve,
several rounds a point, on one server of its own (a Unix socket under DIR).

    bench/curves.py DIR            every point, 5 rounds of 3 s: writes docs/scaling.md and
                                   docs/scaling.png
    bench/curves.py DIR --quick    two points a curve, one round of 1 s (checks the script): writes
                                   DIR/scaling.md and DIR/scaling.png only

Throughput is pgbench's tps (-M prepared); each round runs fenced_lock and its anchor one
after the other (the order alternating between rounds), and a point's ratio is the median of
its rounds' ratios, with the lowest and the highest. Absolute numbers on a shared machine mean
little; the ratios are the result.
"""

import multiprocessing
import os
import statistics
import subprocess
import sys
import time

import psycopg2

from real_parts import commit_measured

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
PG_BIN = "/usr/lib/postgresql/15/bin"
# The goal at every point: fenced_lock at least this share of its anchor.
GOAL_RATIO = 0.90
# The lease hand-off goal: a waiting acquire_lease granted within this of the holder's release.
GOAL_HANDOFF_MS = 1.0
# Arrival order as the clients see it: two sessions that ask within microseconds of each other
# can reach the server in the other order, so a few hand-offs out of thousands may look out of
# order without being so.
GOAL_IN_ORDER = 0.99


class Server:
    """A server of its own with room for the largest point: 64 clients and their holders, and
    100,000 session locks held besides the clients' (the lock table holds
    max_locks_per_transaction x max_connections entries)."""

    def __init__(self, directory):
        self.directory = os.path.join(directory, "server")
        self.pg(["stop"])
        subprocess.run(["rm", "-rf", self.directory], check=True)
        self.pg(["start", "-c", "max_connections=110", "-c", "max_locks_per_transaction=1200",
                 "-c", "shared_preload_libraries=fenced_lock",
                 "-c", "fenced_lock.max_grants=140000"])
        socket = subprocess.run([f"{CHECKOUT}/scripts/pg.sh", "socket", self.directory],
                                check=True, capture_output=True, text=True).stdout.strip()
        self.url = f"host={socket} user=postgres dbname=fenced_lock_curves"
        self.sql("CREATE DATABASE fenced_lock_curves", database="postgres")

    def pg(self, argv):
        subprocess.run([f"{CHECKOUT}/scripts/pg.sh", argv[0], self.directory, *argv[1:]],
                       check=True, stdout=subprocess.DEVNULL)

    def connect(self, autocommit=True):
        connection = psycopg2.connect(self.url)
        connection.autocommit = autocommit
        return connection

    def sql(self, *statements, database=None):
        url = self.url if database is None else self.url.replace("fenced_lock_curves", database)
        connection = psycopg2.connect(url)
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
                return cursor.fetchall() if cursor.description else None
        finally:
            connection.close()

    def stop(self):
        self.pg(["stop"])


def pgbench(server, script, clients, seconds, defines=()):
    """pgbench's tps for bench/SCRIPT.sql; a client's error fails the run, loudly."""
    argv = [f"{PG_BIN}/pgbench", "-n", "-M", "prepared", "-c", str(clients),
            "-j", str(min(clients, os.cpu_count())), "-T", str(seconds),
            "-f", f"{HERE}/{script}.sql", *[f"-D{define}" for define in defines], server.url]
    result = subprocess.run(argv, capture_output=True, text=True)
    for line in result.stdout.splitlines():
        if line.startswith("tps = ") and result.returncode == 0:
            return float(line.split()[2])
    sys.exit(f"curves: pgbench {script} failed ({clients} clients):\n"
             + "\n".join((result.stdout + result.stderr).splitlines()[-8:]))


class Curve:
    """One dimension: its points, and per point and comparison the rounds of both sides."""

    def __init__(self, title, dimension, comparisons):
        self.title, self.dimension = title, dimension
        # (label, fenced script, anchor label, anchor script)
        self.comparisons = comparisons
        self.points = []
        self.rounds = {}  # (comparison label, point) -> [(fenced tps, anchor tps)]
        self.cpu = {}  # point -> {script: backend CPU per call, microseconds}, where measured

    def measure(self, server, point, rounds, seconds, clients, defines=(), labels=None):
        self.points.append(point)
        for label, fenced, _, anchor in self.comparisons:
            if labels is not None and label not in labels:
                continue
            pairs = []
            for number in range(rounds):
                # Alternating order: a machine that slows down during a round costs both sides.
                first, second = (fenced, anchor) if number % 2 == 0 else (anchor, fenced)
                tps = {script: pgbench(server, script, clients(label), seconds, defines)
                       for script in (first, second)}
                pairs.append((tps[fenced], tps[anchor]))
            self.rounds[(label, point)] = pairs
            ratio, low, high = self.ratio(label, point)
            print(f"{self.dimension} {point}: {label} {statistics.median(p[0] for p in pairs):.0f}"
                  f" tps, anchor {statistics.median(p[1] for p in pairs):.0f} tps, {ratio:.2f}x"
                  f" (rounds {low:.2f}x-{high:.2f}x)", flush=True)

    def ratio(self, label, point):
        ratios = sorted(fenced / anchor for fenced, anchor in self.rounds[(label, point)])
        return statistics.median(ratios), ratios[0], ratios[-1]

    def measured(self, label):
        return [point for point in self.points if (label, point) in self.rounds]

    def goals(self):
        """(passed, text) per comparison: every point at least GOAL_RATIO, and the ratio at the
        largest point not more than 0.10 below the smallest's (fenced_lock's cost growing no
        faster than its anchor's)."""
        results = []
        for label, _, anchor_label, _ in self.comparisons:
            points = self.measured(label)
            if not points:
                continue
            ratios = [self.ratio(label, point)[0] for point in points]
            low = [point for point, ratio in zip(points, ratios) if ratio < GOAL_RATIO]
            bends = ratios[-1] < ratios[0] - 0.10
            text = (f"{label} vs {anchor_label}, {self.dimension} {points[0]} to {points[-1]}: "
                    f"ratio {ratios[0]:.2f}x to {ratios[-1]:.2f}x (lowest {min(ratios):.2f}x)")
            if low:
                text += f"; below {GOAL_RATIO:.2f}x at {', '.join(map(str, low))}"
            if bends:
                text += "; bends down faster than its anchor"
            results.append((not low and not bends, text))
        return results

    def table(self):
        lines = [f"### {self.title}", "",
                 f"| {self.dimension} | fenced_lock | tps | anchor | tps | ratio (rounds) |",
                 "|---:|---|---:|---|---:|---|"]
        for label, _, anchor_label, _ in self.comparisons:
            for point in self.measured(label):
                pairs = self.rounds[(label, point)]
                ratio, low, high = self.ratio(label, point)
                lines.append(f"| {point:,} | {label} | {statistics.median(p[0] for p in pairs):,.0f}"
                             f" | {anchor_label} | {statistics.median(p[1] for p in pairs):,.0f}"
                             f" | **{ratio:.2f}x** ({low:.2f}-{high:.2f}) |")
        return lines


def hold_session_locks(server, count, holders=4):
    """`count` session locks held by `holders` other sessions (acquire_fenced_session on
    namespace 2001), until their connections are closed."""
    connections = []
    for number in range(holders):
        connection = server.connect()
        share = count // holders + (1 if number < count % holders else 0)
        first = 1 + number * (count // holders + 1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(acquire_fenced_session(2001, g)) FROM "
                           "generate_series(%s, %s) g", (first, first + share - 1))
        connections.append(connection)
    held = server.sql("SELECT count(*) FROM fenced_locks WHERE ns = 2001")[0][0]
    if held != count:
        sys.exit(f"curves: {held} session locks held, not {count}")
    return connections


def add_lease_rows(server, first, last):
    """Lease rows first..last of other owners (namespace 2002): half live for an hour, half
    expired a minute ago (kept: the sweep deletes rows only an hour after they expired); the
    hand-written TTL table gets the same rows (ids from 10,000,001)."""
    server.sql(
        f"""INSERT INTO fenced_lease_state
                (ns, id, owner, holder, token, acquired_at, renewed_at, expires_at, slot)
            SELECT 2002, g, 'owner-' || g % 16, 'postgres'::regrole, g, now(), now(),
                   now() + CASE WHEN g % 2 = 0 THEN interval '1 hour'
                                ELSE interval '-1 minute' END, 0
              FROM generate_series({first}, {last}) g""",
        f"""INSERT INTO bench_leases (id, owner, expires_at)
            SELECT 10000000 + g, 'owner-' || g % 16,
                   now() + CASE WHEN g % 2 = 0 THEN interval '1 hour'
                                ELSE interval '-1 minute' END
              FROM generate_series({first}, {last}) g""",
        "VACUUM ANALYZE fenced_lease_state", "VACUUM ANALYZE bench_leases")


def backend_cpu_us(server, script, calls):
    """Backend CPU per call (microseconds) of bench/SCRIPT.sql, one client: the postmaster's
    children's CPU time grows by the backend's when it exits. Autovacuum is off meanwhile."""
    with open(os.path.join(server.directory, "data", "postmaster.pid")) as pid_file:
        postmaster = pid_file.readline().strip()

    def ticks():
        with open(f"/proc/{postmaster}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return int(fields[13]) + int(fields[14])  # cutime, cstime

    time.sleep(0.2)  # the postmaster reaps earlier backends
    before = ticks()
    subprocess.run([f"{PG_BIN}/pgbench", "-n", "-M", "prepared", "-c", "1", "-t", str(calls),
                    "-f", f"{HERE}/{script}.sql", server.url],
                   check=True, capture_output=True)
    time.sleep(0.2)
    return (ticks() - before) * 1e6 / os.sysconf("SC_CLK_TCK") / calls


# Hand-off on one hot key: every session loops (wait, hold for HOLD_S, release); the time from
# one holder's release returning to it (its commit done) to the next grant returning to the
# next holder, when that one was already waiting. The waiter may be told before the holder:
# such a hand-off counts as 0.
HOLD_S = 0.001
HANDOFF_KINDS = {
    "acquire_fenced (transaction lock)": "transaction",
    "acquire_lease, wait form": "lease",
    "by hand: pg_advisory_xact_lock + nextval": "by_hand",
}


def handoff_worker(url, kind, number, seconds, queue):
    """One session's (arrived, granted, releasing, released) times: it asked for the key, got
    it, sent its release, saw the release done; on CLOCK_MONOTONIC (one clock for every
    process of the machine)."""
    connection = psycopg2.connect(url)
    connection.autocommit = kind == "lease"
    events = []
    with connection.cursor() as cursor:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            arrived = time.monotonic_ns()
            if kind == "transaction":
                cursor.execute("SELECT acquire_fenced(3001, 1)")
            elif kind == "by_hand":
                cursor.execute("SELECT pg_advisory_xact_lock(3001, 1), nextval('bench_token_seq')")
            else:
                cursor.execute("SELECT acquire_lease(3001, 1, %s, '30 s', '30 s')",
                               (f"waiter-{number}",))
            token = cursor.fetchone()[0]
            granted = time.monotonic_ns()
            if kind == "lease" and token is None:
                sys.exit("curves: acquire_lease's wait of 30 s ended without the lease")
            time.sleep(HOLD_S)
            releasing = time.monotonic_ns()
            if kind == "lease":
                cursor.execute("SELECT release_lease(3001, 1, %s)", (token,))
            else:
                connection.commit()
            events.append((arrived, granted, releasing, time.monotonic_ns()))
    connection.close()
    queue.put(events)


def handoff(server, kind, waiters, seconds):
    """Hand-off latencies (ms) and the share of grants that went to the session that asked first, with
    waiters + 1 sessions on one key (one holds, the others wait)."""
    queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=handoff_worker,
                                       args=(server.url, kind, number, seconds, queue))
               for number in range(waiters + 1)]
    for worker in workers:
        worker.start()
    events = sorted((event for _ in workers for event in queue.get()), key=lambda e: e[1])
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            sys.exit(f"curves: a hand-off worker ({kind}) failed")
    latencies, in_order, handed = [], 0, 0
    for previous, (arrived, granted, _, _) in zip(events, events[1:]):
        releasing, released = previous[2], previous[3]
        if arrived >= releasing:
            continue  # nobody was waiting at the release
        handed += 1
        latencies.append(max(0, granted - released) / 1e6)
        waiting = [e[0] for e in events if e[0] < releasing < e[1]]
        in_order += arrived == min(waiting)
    if not latencies:
        sys.exit(f"curves: no hand-off measured ({kind}, {waiters} waiters)")
    latencies.sort()
    return {"p50": latencies[len(latencies) // 2],
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "handoffs": handed, "in_order": in_order / handed}


def main():
    directory = os.path.abspath(sys.argv[1])
    quick = "--quick" in sys.argv[2:]
    rounds, seconds = (1, 1) if quick else (5, 3)
    os.makedirs(directory, exist_ok=True)
    started = time.monotonic()
    server = Server(directory)
    try:
        server.sql("CREATE EXTENSION fenced_lock",
                   "SELECT register_namespace('bench', 2001)",
                   "CREATE SEQUENCE bench_token_seq AS bigint CACHE 1 NO CYCLE",
                   "CREATE TABLE bench_leases (id int PRIMARY KEY, owner text, "
                   "expires_at timestamptz)")
        curves = measure(server, quick, rounds, seconds)
        waits = measure_handoffs(server, [1, 8] if quick else [1, 8, 32], 1 if quick else 4)
    finally:
        server.stop()
    write(directory, quick, curves, waits, rounds, seconds, time.monotonic() - started)


def measure(server, quick, rounds, seconds):
    pick = (lambda points: [points[0], points[-1]]) if quick else (lambda points: points)
    lock = ("acquire_fenced", "acquire_random", "pg_advisory_xact_lock", "bare_lock")
    lease = ("lease cycle", "lease_cycle", "TTL row by hand", "raw_lease_cycle")

    clients = Curve("Clients (random keys; max_connections 110)", "clients", [lock, lease])
    for count in pick([1, 2, 4, 8, 16, 32, 64]):
        clients.measure(server, count, rounds, seconds, lambda _, count=count: count)

    view = ("fenced_locks, one key", "view_one_key", "pg_locks, one key", "pg_locks_one_key")
    held = Curve("Held locks (session locks held by 4 other sessions; 8 clients acquire, "
                 "1 client reads the view)", "held locks", [lock, view])
    for count in pick([0, 1000, 10000, 100000]):
        holders = hold_session_locks(server, count)
        held.measure(server, count, rounds, seconds,
                     lambda label: 1 if label == view[0] else 8)
        for connection in holders:
            connection.close()

    rows = Curve("Lease table rows (other owners' leases, half live, half expired; 8 clients)",
                 "lease rows", [lease])
    previous = 0
    for count in pick([0, 10000, 100000, 1000000]):
        if count > previous:
            add_lease_rows(server, previous + 1, count)
        previous = count
        rows.measure(server, count, rounds, seconds, lambda _: 8)
        server.sql("ALTER SYSTEM SET autovacuum = off", "SELECT pg_reload_conf()")
        calls = 2000 if quick else 10000
        rows.cpu[count] = {script: backend_cpu_us(server, script, calls)
                           for script in ("lease_cycle", "raw_lease_cycle")}
        server.sql("ALTER SYSTEM RESET autovacuum", "SELECT pg_reload_conf()")
        print(f"lease rows {count}: backend CPU per cycle {rows.cpu[count]['lease_cycle']:.1f}"
              f" us, by hand {rows.cpu[count]['raw_lease_cycle']:.1f} us", flush=True)

    keys = Curve("Keys per call (8 clients, consecutive keys from a random first one)",
                 "keys", [("acquire_fenced_all", "keys_fenced_all",
                           "pg_advisory_xact_lock per key, one statement", "keys_bare")])
    for count in pick([1, 10, 100, 1000]):
        keys.measure(server, count, rounds, seconds, lambda _: 8, defines=[f"keys={count}"])
    return [clients, held, rows, keys]


def measure_handoffs(server, waiter_counts, seconds):
    results = {}
    for waiters in waiter_counts:
        for label, kind in HANDOFF_KINDS.items():
            results[(waiters, label)] = handoff(server, kind, waiters, seconds)
            result = results[(waiters, label)]
            print(f"hand-off, {waiters} waiters, {label}: p50 {result['p50']:.2f} ms, "
                  f"p99 {result['p99']:.2f} ms, {result['handoffs']} hand-offs, "
                  f"{result['in_order']:.1%} to the session that asked first", flush=True)
    return results


def handoff_goals(waits):
    lease = "acquire_lease, wait form"
    results = []
    for (waiters, label), result in sorted(waits.items()):
        if label != lease:
            continue
        results.append((result["p50"] <= GOAL_HANDOFF_MS,
                        f"lease hand-off, {waiters} waiter(s): p50 {result['p50']:.2f} ms "
                        f"(goal {GOAL_HANDOFF_MS:g} ms)"))
        results.append((result["in_order"] >= GOAL_IN_ORDER,
                        f"lease hand-off, {waiters} waiter(s): {result['in_order']:.1%} of "
                        f"grants to the session that asked first (goal: arrival order, "
                        f"at least {GOAL_IN_ORDER:.0%} as the clients' clocks see it)"))
    return results


def write(directory, quick, curves, waits, rounds, seconds, elapsed):
    goals = [goal for curve in curves for goal in curve.goals()] + handoff_goals(waits)
    lines = ["# Scaling: how fenced_lock's cost grows with its load", "",
             f"Generated by `make bench CURVES=1` from commit {commit_measured()} on "
             f"{time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, PostgreSQL 15, "
             f"{rounds} round(s) of {seconds} s a point, {elapsed / 60:.0f} minutes. Nothing "
             "here is typed by hand.", "",
             "Each point runs fenced_lock and its anchor (the bare advisory lock, or the SQL a "
             "user would write without fenced_lock) one after the other in every round, the "
             "order alternating; the ratio is fenced_lock's tps over the anchor's, the median "
             "of the rounds (lowest and highest in brackets). Absolute tps on a shared 2-core "
             "machine mean little; the ratios hold. The workloads are the pgbench scripts in "
             "`bench/` (`-M prepared`).", "", "![Ratio to the anchor per dimension](scaling.png)",
             "", "## Goals", ""]
    lines += [f"- {'met' if passed else '**missed**'}: {text}" for passed, text in goals]
    lines += ["", "## Curves", ""]
    for curve in curves:
        lines += curve.table() + [""]
        if curve.cpu:
            lines += ["Backend CPU per lease cycle (one client, the kernel's count; the sweep "
                      "of released and long-expired rows included):", "",
                      "| lease rows | lease cycle | TTL row by hand |", "|---:|---:|---:|"]
            lines += [f"| {count:,} | {cpu['lease_cycle']:.1f} us | "
                      f"{cpu['raw_lease_cycle']:.1f} us |" for count, cpu in curve.cpu.items()]
            lines.append("")
    lines += ["### Waiters on one hot key", "",
              "Every session loops: wait for the key, hold it 1 ms, release it (the "
              "transaction lock and the lock by hand by COMMIT, the lease by `release_lease`). "
              "The hand-off is the time from a holder's release returning to it (its commit "
              "done) to the next grant's return to its client, when that client was already "
              "waiting (0 when the waiter was told first); a lease's grant returns after its "
              "own commit (`acquire_lease` in autocommit, as through a pooler), the "
              "transaction lock's before it; "
              "\"asked first\" is the share of hand-offs that went to the session that asked "
              "first among those waiting, by the clients' clocks (sessions asking within "
              "microseconds of each other can reach the server in the other order).", "",
              "| waiters | kind | p50 | p99 | hand-offs | to the session that asked first |",
              "|---:|---|---:|---:|---:|---:|"]
    for (waiters, label), result in sorted(waits.items()):
        lines.append(f"| {waiters} | {label} | {result['p50']:.2f} ms | {result['p99']:.2f} ms"
                     f" | {result['handoffs']:,} | {result['in_order']:.1%} |")
    text = "\n".join(lines) + "\n"
    target = directory if quick else os.path.join(CHECKOUT, "docs")
    with open(os.path.join(target, "scaling.md"), "w") as document:
        document.write(text)
    plot(os.path.join(target, "scaling.png"), curves, waits)
    print(f"curves: wrote {target}/scaling.md and scaling.png")
    for passed, text in goals:
        print(f"goal {'met' if passed else 'missed'}: {text}")


def plot(path, curves, waits):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(1, len(curves) + 1, figsize=(4 * (len(curves) + 1), 3.6))
    for axis, curve in zip(axes, curves):
        for label, _, anchor_label, _ in curve.comparisons:
            points = curve.measured(label)
            ratios = [curve.ratio(label, point) for point in points]
            positions = range(len(points))
            axis.errorbar(positions, [r[0] for r in ratios],
                          yerr=[[r[0] - r[1] for r in ratios], [r[2] - r[0] for r in ratios]],
                          marker="o", capsize=3, label=f"{label} / {anchor_label}")
            axis.set_xticks(list(positions), [f"{p:,}" for p in points], rotation=45)
        axis.axhline(GOAL_RATIO, color="grey", linestyle="--", linewidth=0.8)
        axis.set_xlabel(curve.dimension)
        axis.set_ylim(0, max(1.5, axis.get_ylim()[1]))
        axis.legend(fontsize=6, loc="lower left")
    axes[0].set_ylabel("fenced_lock tps / anchor tps")
    axis = axes[-1]
    counts = sorted({waiters for waiters, _ in waits})
    by_hand = "by hand: pg_advisory_xact_lock + nextval"
    for label in HANDOFF_KINDS:
        if label == by_hand:
            continue
        axis.plot(range(len(counts)), [waits[(w, by_hand)]["p50"] / waits[(w, label)]["p50"]
                                       for w in counts], marker="o", label=f"{label} / by hand")
    axis.set_xticks(range(len(counts)), [str(c) for c in counts])
    axis.axhline(GOAL_RATIO, color="grey", linestyle="--", linewidth=0.8)
    axis.set_xlabel("waiters on one key (p50 hand-off)")
    axis.set_ylim(0, max(1.5, axis.get_ylim()[1]))
    axis.legend(fontsize=6, loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


if __name__ == "__main__":
    main()
