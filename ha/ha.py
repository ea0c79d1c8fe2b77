"""fenced_lock under Patroni + etcd: tokens, leases and fenced writes through the failovers of
the HA stack people run (`make ha`; `make ha QUICK=1` is the short form inside `make test`).

    ha.py DIRECTORY [--quick] [--only MODE]

Each mode is a cluster of its own, bootstrapped by Patroni; each of its faults (faults.py) is
a trial with a workload of its own (workload.py) whose histories the checker reads, and
checks.py says what must hold. The summary goes to stdout and DIRECTORY/summary.md; a full run
also writes DIRECTORY/results.md, the report docs/ha.md takes."""

import os
import platform
import signal
import sys
import time

import psycopg2

from autofailover import FAULTS as AUTO_FAILOVER_FAULTS, AutoFailoverCluster
from checks import Report, analyse, control_harmed
from cluster import PATRONI_TTL, Cluster, Processes, log
from counters import Counters, commits
from faults import run_fault
from histories import check_trial
from real_parts import commit_measured, first_line
from workload import HOT_KEYS, ROWS, Resource, Trial

SETTLE_S = 3
# A third of the lease's TTL, and a margin.
RENEWAL_WAIT_S = 25
SYNCHRONOUS_FAULTS = ["switchover", "failover", "postmaster killed", "node lost",
                      "frozen patroni", "cut from etcd"]
# A replica whose WAL receiver is paused cannot be a synchronous standby: asynchronous only.
ASYNCHRONOUS_FAULTS = SYNCHRONOUS_FAULTS + ["lagging replica"]
CONTROL_FAULTS = ["lagging replica", "frozen patroni"]
BOTH_OFF = {"fenced_lock.failover_skip": 0, "fenced_lock.token_block": 1}
SKIP_OFF = {"fenced_lock.failover_skip": 0}
BLOCK_OFF = {"fenced_lock.token_block": 1}
ETCD3_FREEZES = 4
AUTO_FAILOVER_FAULTS_RUN = ["switchover", "failover", "postmaster killed", "node lost",
                            "lagging secondary"]


class Mode:
    """A cluster and the faults done to it. `control` "harm": the settings leave a window the
    faults must reach, shown as harm at the resource; "measure": what happens is the result
    (only what fencing itself promises is checked); None: fenced_lock's checks. `dcs`:
    Patroni's section for etcd."""

    def __init__(self, name, synchronous, faults, parameters=None, control=None, dcs="etcd"):
        self.name, self.synchronous, self.faults = name, synchronous, faults
        self.parameters, self.control, self.dcs = parameters or {}, control, dcs

    def cluster(self, processes, directory):
        if self.dcs == "pg_auto_failover":
            return AutoFailoverCluster(processes, directory, self.synchronous, self.parameters)
        return Cluster(processes, directory, self.synchronous, self.parameters, self.dcs)

    def fault_functions(self):
        return AUTO_FAILOVER_FAULTS if self.dcs == "pg_auto_failover" else None


def modes(quick):
    if quick:
        # What matters, in about five minutes: both modes, the lagging replica and the frozen
        # Patroni (a split brain) with fenced_lock's settings, one control, pg_auto_failover's
        # lagging secondary. The full run has every fault in every mode.
        return [Mode("synchronous", True, ["switchover", "postmaster killed"]),
                Mode("asynchronous", False, ["lagging replica", "frozen patroni", "failover"]),
                Mode("asynchronous control", False, ["lagging replica"], BOTH_OFF, "harm"),
                Mode("pg_auto_failover", True, ["lagging secondary"],
                     dcs="pg_auto_failover")]
    rounds = 2
    return [Mode("synchronous", True, SYNCHRONOUS_FAULTS * rounds),
            Mode("asynchronous", False, ASYNCHRONOUS_FAULTS * rounds),
            Mode("asynchronous control", False, CONTROL_FAULTS * rounds, BOTH_OFF, "harm"),
            Mode("asynchronous control (failover_skip 0)", False, CONTROL_FAULTS, SKIP_OFF,
                 "harm"),
            Mode("asynchronous (token_block 1)", False, CONTROL_FAULTS, BLOCK_OFF),
            # Patroni 3.0.2's etcd3 section: does a thawed Patroni take the leader key back?
            Mode("synchronous etcd3", True, ["frozen patroni"] * ETCD3_FREEZES,
                 control="measure", dcs="etcd3"),
            # A second HA manager, replicating synchronously as it does by default.
            Mode("pg_auto_failover", True, AUTO_FAILOVER_FAULTS_RUN * rounds,
                 dcs="pg_auto_failover")]


def run_mode(directory, resource, mode, first_trial):
    directory = os.path.join(directory, mode.name.replace(" ", "-").strip("()"))
    os.makedirs(directory, exist_ok=True)
    processes = Processes(directory)
    report = Report(mode.name)
    number = first_trial
    try:
        cluster = mode.cluster(processes, directory)
        cluster.start()
        for kind in mode.faults:
            number += 1
            trial = Trial(processes, directory, number, cluster, resource)
            try:
                time.sleep(SETTLE_S)
                fault = run_fault(cluster, kind, trial, mode.control == "harm",
                                  mode.fault_functions())
                trial.await_renewal(fault["new_port"], fault["old_postmaster"],
                                    RENEWAL_WAIT_S)
                time.sleep(SETTLE_S)
            except Exception as error:  # reported as a failed check, after what was done
                report.check(f"{kind} (t{number}): done and recovered from", False,
                             f"{type(error).__name__}: {error}")
                trial.stop()
                break
            analyse(report, mode, fault, trial, resource, trial.stop())
        if mode.control == "harm":
            control_harmed(report)
        if mode.synchronous and mode.control is None and mode.dcs == "etcd":
            number += 1
            discarded_timeline(report, processes, directory, number, cluster, resource)
    except Exception as error:
        report.check("the cluster ran", False, f"{type(error).__name__}: {error}")
    finally:
        processes.stop_all()
    return report, number


def discarded_timeline(report, processes, directory, number, cluster, resource):
    """The state a split brain leaves when the side that handed out the higher tokens is the
    one discarded (seen with Patroni 3.0.2's etcd3 section): the resource has accepted a token
    far above anything the surviving primary will issue, so it refuses every later holder. The
    discarded side's write is made here directly, with such a token; the operator sees the
    cause in SF001's detail and ends it with advance_fencing_tokens on the primary."""
    trial = Trial(processes, directory, number, cluster, resource)
    label = f"discarded timeline (t{number})"
    time.sleep(SETTLE_S)
    key = HOT_KEYS[0]
    row = trial.row_base + key
    with psycopg2.connect(cluster.leader().dsn()) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT current_setting('fenced_lock.failover_skip')::bigint")
        skip = cursor.fetchone()[0]
    conn.close()
    (highest,), = resource.query("SELECT max(token) FROM writes WHERE id = %s", (row,))
    discarded = highest + 3 * skip
    side = Counters(resource.dsn)
    value = side.read("fenced_update", row, discarded)
    side.write("fenced_update", row, "discarded side", discarded, value, 0, time.monotonic_ns())
    side.close()
    (after,), = resource.query("SELECT max(seq) FROM writes")
    log(f"discarded timeline: key {key} written with token {discarded}")
    time.sleep(SETTLE_S)
    (accepted, refused), = resource.query(
        "SELECT count(*) FILTER (WHERE accepted), count(*) FILTER (WHERE NOT accepted) "
        "FROM writes WHERE id = %s AND token < %s AND seq > %s", (row, discarded, after))
    report.check(f"{label}: after the discarded side's write, the resource refuses every "
                 f"holder", accepted == 0 and refused > 0, f"{refused} refused, {accepted} "
                 f"accepted")
    # What a holder using fenced_update_strict is told.
    with psycopg2.connect(cluster.kv_dsn()) as lock, psycopg2.connect(resource.dsn) as res:
        cursor = lock.cursor()
        cursor.execute("SELECT acquire_fenced(7001, %s)", (key,))
        token = cursor.fetchone()[0]
        try:
            res.cursor().execute("SELECT fenced_update('counters', %s::int, %s)",
                                 (row, token))
            detail = "no error"
        except psycopg2.Error as error:
            detail = f"{error.pgcode}: {error.diag.message_detail}"
    report.check(f"{label}: SF001's detail names a token sequence that went back",
                 detail.startswith("SF001") and "failover_skip" in detail, detail)
    # The way out: move the lock server's tokens past the resource's highest.
    with psycopg2.connect(cluster.kv_dsn()) as conn:
        conn.cursor().execute("SELECT advance_fencing_tokens(%s)", (discarded,))
    (fixed,), = resource.query("SELECT max(seq) FROM writes")
    time.sleep(SETTLE_S)
    (accepted,), = resource.query("SELECT count(*) FROM writes WHERE id = %s AND accepted "
                                  "AND seq > %s", (row, fixed))
    report.check(f"{label}: after advance_fencing_tokens, holders write again", accepted > 0,
                 f"{accepted} accepted writes to key {key} in {SETTLE_S} s")
    died = trial.stop()
    summary = check_trial(f"{trial.directory}.history", [w.history for w in trial.workers],
                          commits(resource.dsn, trial.row_base, ROWS))
    kinds = {} if summary is None else summary["violations"]
    report.check(f"{label}: the checker finds nothing harmful and no worker died",
                 summary is not None and not died and not any(
                     kinds.get(k) for k in ("stale_write_accepted", "token_of_two_holders",
                                            "lost_update", "token_repeated")),
                 f"checker: {kinds}, died: {died}")


def versions():
    return (f"{first_line(['patroni', '--version'])}, {first_line(['etcd', '--version'])}, "
            f"{first_line(['/usr/lib/postgresql/15/bin/postgres', '--version'])}")


def results(reports, seconds, measured):
    """The results section of docs/ha.md: every trial's figures, per mode, and the checks
    that failed; `measured` is the commit the run began with."""
    lines = [f"Generated by `make ha` from commit {measured} on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
             f"{platform.platform()}; {versions()}; {seconds:.0f} s. Patroni `ttl` "
             f"{PATRONI_TTL} s; leases of 60 s renewed every 20 s.", ""]
    header = ("| fault | healthy after | grants | lease terms | writes accepted | refused: "
              "paused holder / deposed primary / other | grants on the old primary after "
              "the promotion | first new token - last old | issued again | lease renewed on "
              "the new primary | overlapping lease terms | checker |")
    for report in reports:
        passed = sum(ok for _, ok, _ in report.checks)
        freezes = [f for f in report.trials if f["kind"] == "frozen patroni"]
        taken_back = sum(f["retook"] for f in freezes)
        lines += [f"### {report.mode}", "",
                  f"{passed} checks passed, {len(report.checks) - passed} failed."
                  + (f" The thawed Patroni took the leader key back after {taken_back} of "
                     f"{len(freezes)} freezes." if freezes else ""), "",
                  header, "|" + "---|" * 12]
        for f in report.trials:
            other = f["refused"] - f["refused_paused"] - f["refused_deposed"]
            verdict = ", ".join(f"{k} {n}" for k, n in sorted(f["violations"].items()))
            skip = "" if f["skip"] is None else f"{f['skip']:,}"
            lines.append(
                f"| {f['kind']}{' (leader key taken back)' if f['retook'] else ''} | "
                f"{f['healthy_s']:.1f} s | {f['grants']:,} | {f['terms']} | "
                f"{f['accepted']:,} | {f['refused_paused']} / {f['refused_deposed']} / "
                f"{other} | {f['late']} | "
                f"{skip} | {f['reissued']} | "
                f"{'yes' if f['lease_survived'] else 'no'} | {f['lease_overlaps']} | "
                f"{verdict or 'clean'} |")
        lines += [""] + [f"- FAIL: {name}: {detail}" for name, ok, detail in report.checks
                         if not ok] + [""]
    return lines


def main():
    # A stopped run still stops everything it started (the `finally` blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    directory = os.path.abspath(sys.argv[1])
    quick = "--quick" in sys.argv[2:]
    os.makedirs(directory, exist_ok=True)
    resource = Resource(os.path.join(directory, "resource"))
    chosen = modes(quick)
    # --only MODE: one mode (while working on the suite).
    if "--only" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1]
        chosen = [mode for mode in chosen if mode.name == only]
    started, measured = time.monotonic(), commit_measured()
    reports, number = [], 0
    try:
        for mode in chosen:
            report, number = run_mode(directory, resource, mode, number)
            reports.append(report)
            # Each mode's checks as it ends (make test times each mode by its summary line).
            print("\n".join(report.lines()), flush=True)
    finally:
        resource.stop()
    seconds = time.monotonic() - started
    lines = [line for report in reports for line in report.lines()]
    lines.append(f"ha: {len(chosen)} modes in {seconds:.0f} s")
    print(lines[-1], flush=True)
    with open(os.path.join(directory, "summary.md"), "w") as out:
        out.write("\n".join(lines) + "\n")
    if not quick and "--only" not in sys.argv:
        with open(os.path.join(directory, "results.md"), "w") as out:
            out.write("\n".join(results(reports, seconds, measured)) + "\n")
    failed = sum(not ok for report in reports for _, ok, _ in report.checks)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
