"""fenced_lock under Patroni + etcd: tokens, leases and leaders through the failovers of the HA
stack people run (`make ha`; `make ha QUICK=1` is the short form inside `make test`).

    ha.py DIRECTORY [--quick] [--only MODE]

Each mode is a cluster of its own, bootstrapped by Patroni, with the workload (workload.py)
running through its faults (faults.py); checks.py says what must hold. The summary goes to
stdout and to DIRECTORY/summary.md."""

import os
import signal
import sys
import time

import psycopg2

from cluster import Cluster, Processes, log
from checks import analyse
from faults import run_fault
from workload import HOT_KEYS, Resource, Workload

SETTLE_S = 3
SYNCHRONOUS_FAULTS = ["switchover", "failover", "postmaster killed", "node lost",
                      "frozen patroni", "cut from etcd"]
# A replica whose WAL receiver is paused cannot be a synchronous standby: asynchronous only.
ASYNCHRONOUS_FAULTS = SYNCHRONOUS_FAULTS + ["lagging replica"]
# The control: without the failover skip and the allocator's blocks, the faults that lose the
# old primary's last WAL repeat tokens.
CONTROL = {"fenced_lock.failover_skip": 0, "fenced_lock.token_block": 1}
CONTROL_FAULTS = ["lagging replica", "frozen patroni"]


def run_mode(directory, resource, mode, synchronous, faults, parameters=None, control=False,
             discarded_timeline=False):
    directory = os.path.join(directory, mode.replace(" ", "-"))
    os.makedirs(directory, exist_ok=True)
    processes = Processes(directory)
    try:
        cluster = Cluster(processes, directory, synchronous, parameters)
        cluster.start()
        resource.reset()
        workload = Workload(processes, directory, cluster, resource)
        time.sleep(SETTLE_S)
        done, extra = [], []
        try:
            for kind in faults:
                done.append(run_fault(cluster, kind))
                time.sleep(SETTLE_S)
            if discarded_timeline:
                extra = recover_from_discarded_timeline(cluster, resource)
        except Exception as error:  # reported as a failed check, after what was done
            extra.append(("every fault done and recovered from", False,
                          f"{type(error).__name__}: {error}"))
        leader_events, client_logs = workload.stop()
        report = analyse(mode, control, done, client_logs, leader_events, resource)
        for name, ok, detail in extra:
            report.check(name, ok, detail)
        return report, done
    finally:
        processes.stop_all()


def recover_from_discarded_timeline(cluster, resource):
    """The state a split brain leaves when the side that handed out the higher tokens is the
    one discarded (seen with Patroni 3.0.2's etcd3 section): the resource has accepted a token
    far above anything the surviving primary will issue, so it refuses every later holder. The
    discarded side's write is made here directly, with such a token; the operator sees the
    cause in SF001's detail and ends it with advance_fencing_tokens on the primary."""
    checks = []
    key = HOT_KEYS[0]
    primary = cluster.leader()
    with psycopg2.connect(primary.dsn()) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT current_setting('fenced_lock.failover_skip')::bigint")
        skip = cursor.fetchone()[0]
    (highest,), = resource.query("SELECT max(token) FROM writes")
    discarded = highest + 3 * skip
    resource.query("SELECT fenced_update('resource', %s, %s)", (key, discarded))
    log(f"discarded timeline: key {key} written with token {discarded}")
    time.sleep(SETTLE_S)
    (after,), = resource.query("SELECT max(seq) FROM writes")
    (accepted, refused), = resource.query(
        "SELECT count(*) FILTER (WHERE accepted), count(*) FILTER (WHERE NOT accepted) "
        "FROM writes WHERE key = %s AND token < %s AND seq > %s - 1000", (key, discarded, after))
    checks.append(("after the discarded side's write, the resource refuses every holder",
                   accepted == 0 and refused > 0, f"{refused} refused, {accepted} accepted"))
    # What a holder using fenced_update_strict is told.
    with psycopg2.connect(cluster.kv_dsn()) as lock, psycopg2.connect(resource.dsn) as res:
        cursor = lock.cursor()
        cursor.execute("SELECT acquire_fenced(7001, %s)", (key,))
        token = cursor.fetchone()[0]
        try:
            res.cursor().execute("SELECT fenced_update_strict('resource', %s, %s)", (key, token))
            detail = "no error"
        except psycopg2.Error as error:
            detail = f"{error.pgcode}: {error.diag.message_detail}"
    checks.append(("SF001's detail names a token sequence that went back",
                   detail.startswith("SF001") and "failover_skip" in detail, detail))
    # The way out: move the lock server's tokens past the resource's highest.
    with psycopg2.connect(cluster.kv_dsn()) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT advance_fencing_tokens(%s)", (discarded,))
    (before_fix,), = resource.query("SELECT max(seq) FROM writes")
    time.sleep(SETTLE_S)
    (accepted,), = resource.query(
        "SELECT count(*) FROM writes WHERE key = %s AND accepted AND seq > %s",
        (key, before_fix))
    checks.append(("after advance_fencing_tokens, holders write again", accepted > 0,
                   f"{accepted} accepted writes to key {key} in {SETTLE_S} s"))
    return checks


def main():
    # A stopped run still stops everything it started (the `finally` blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    directory = os.path.abspath(sys.argv[1])
    quick = "--quick" in sys.argv[2:]
    os.makedirs(directory, exist_ok=True)
    resource = Resource(os.path.join(directory, "resource"))
    # The short form: one fault of each kind in synchronous mode, and the control once.
    rounds = 1 if quick else 3
    modes = [("synchronous", True, SYNCHRONOUS_FAULTS * rounds, None, False)]
    if not quick:
        modes.append(("asynchronous", False, ASYNCHRONOUS_FAULTS * rounds, None, False))
    modes.append(("asynchronous control", False, CONTROL_FAULTS * rounds, CONTROL, True))
    # --only MODE: one mode of the full run (while working on the suite).
    if "--only" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1]
        modes = [m for m in modes if m[0] == only]
    started = time.monotonic()
    lines = []
    failed = 0
    try:
        for mode, synchronous, faults, parameters, control in modes:
            report, done = run_mode(directory, resource, mode, synchronous, faults, parameters,
                                    control, discarded_timeline=mode == "synchronous")
            lines += list(report.lines())
            lines += [f"    {fault['summary']}" for fault in done]
            failed += sum(not ok for _, ok, _ in report.checks)
    finally:
        resource.stop()
    lines.append(f"ha: {len(modes)} modes in {time.monotonic() - started:.0f} s")
    print("\n".join(lines), flush=True)
    with open(os.path.join(directory, "summary.md"), "w") as out:
        out.write("\n".join(lines) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
