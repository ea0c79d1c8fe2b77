"""What must hold after each trial (one fault with its workload), read from its workers'
histories, the resource's commits and the history checker's verdict (checker/README.md)."""

from collections import Counter

from counters import commits
from faults import SPLIT_BRAIN
from histories import check_trial, read_history
from workload import ROWS

# The checker's kinds that mean harm at the resource, or a token the lock server issued twice.
HARMFUL = ("stale_write_accepted", "token_of_two_holders", "lost_update")
# Faults that leave the old primary's last WAL unreplicated (by construction) or two writable
# primaries: where a control without the failover skip repeats tokens. Whether a repeated
# token also reaches the resource twice depends on which rows its two holders write (at a
# frozen Patroni the deposed primary's later tokens are higher, so the resource may refuse
# every repeat), so a control must fail fenced_lock's checks at each such fault, and show harm
# at the resource at one of them at least.
CONTROLLED = {"lagging replica", "frozen patroni"}


def harm_of(kinds):
    """How many of the checker's findings (`kinds`, by kind) are harm at the resource."""
    return sum(kinds.get(kind, 0) for kind in HARMFUL)


class Report:
    def __init__(self, mode):
        self.mode, self.checks, self.trials = mode, [], []

    def check(self, name, ok, detail):
        self.checks.append((name, bool(ok), detail))

    def lines(self):
        yield f"== {self.mode}"
        for trial in self.trials:
            yield f"  {trial['summary']}"
        failed = [(name, detail) for name, ok, detail in self.checks if not ok]
        passed = len(self.checks) - len(failed)
        for name, detail in failed:
            yield f"  FAIL {name}: {detail}"
        yield f"ha ({self.mode}): {passed} passed, {len(failed)} failed"


def operations(history):
    """A history's completed operations: each completion with its invoke's fields (the token
    a renewal or a write carried), `time` the completion's."""
    invoked = {}
    for event in history:
        if event["type"] == "invoke":
            invoked[(event["process"], event["op"])] = event
        elif event["type"] in ("ok", "fail", "info"):
            invoke = invoked.pop((event["process"], event["op"]), {})
            yield {**invoke, **event, "invoked": invoke.get("time")}


def events_of(trial):
    return {worker.name: list(operations(read_history(worker.history)))
            for worker in trial.workers}


def figures(fault, trial, events, kinds):
    """One trial's figures, from its workers' histories."""
    old_port, new_port = fault["old_port"], fault["new_port"]
    promoted = fault["promoted"]

    def on_old(event):
        return event["port"] == old_port and event["postmaster"] == fault["old_postmaster"]

    def on_new(event):
        return event["port"] == new_port and event["postmaster"] != fault["old_postmaster"]
    lease_workers = {w.name for w in trial.workers if w.kind == "lease"}
    paused = trial.paused["worker"].name if trial.paused else None
    grants, writes, errors, terms, renewals = [], [], Counter(), {}, []
    for name, history in events.items():
        for event in history:
            if "code" in event:
                errors[event["code"]] += 1
            if event["type"] != "ok":
                continue
            if event["f"] == "acquire" and name in lease_workers:
                terms[event["token"]] = {"start": event["server_time"], "end": event["expires"],
                                         "at": event["time"]}
            elif event["f"] == "acquire":
                grants.append(event)
            elif event["f"] == "renew":
                renewals.append(event)
            elif event["f"] == "write":
                writes.append(event)
    for renewal in renewals:
        term = terms.get(renewal["token"])
        if term is not None:
            term["end"] = max(term["end"], renewal["expires"])
    granted = {g["token"]: g for g in grants}
    old = [g for g in grants if on_old(g)]
    new = [g for g in grants if on_new(g)]
    refused = [w for w in writes if not w["accepted"]]

    def deposed(write):
        grant = granted.get(write["token"])
        return grant is not None and on_old(grant) and grant["time"] >= promoted

    held = [token for token, term in sorted(terms.items(), key=lambda item: item[1]["at"])
            if term["at"] < fault["started"]]
    survived = held and any(r["token"] == held[-1] and on_new(r) for r in renewals)
    spans = sorted((t["start"], t["end"]) for t in terms.values())
    overlaps = sum(1 for i, (_, end) in enumerate(spans)
                   for later_start, _ in spans[i + 1:] if later_start < end)
    after = [w for w in writes if w["accepted"] and w["time"] > fault["healthy"]]
    return {
        "grants": len(grants), "terms": len(terms), "accepted": len(writes) - len(refused),
        "refused": len(refused),
        "refused_paused": sum(1 for w in refused if w["worker"] == paused),
        "refused_deposed": sum(1 for w in refused if w["worker"] != paused and deposed(w)),
        "late": sum(1 for g in old if g["time"] >= promoted),
        "late_haproxy": sum(1 for g in old if g["time"] >= promoted
                            and g["worker"].startswith("h")),
        "skip": (min(g["token"] for g in new) - max(g["token"] for g in old)
                 if old and new else None),
        "reissued": len({g["token"] for g in new} & {g["token"] for g in old}),
        "lease_held": bool(held), "lease_survived": bool(survived),
        "lease_overlaps": overlaps,
        "live_clients": sum(1 for w in after if w["worker"] not in lease_workers),
        "live_haproxy": sum(1 for w in after if w["worker"].startswith("h")),
        "live_lease": sum(1 for w in after if w["worker"] in lease_workers),
        "errors": dict(errors), "violations": kinds,
        "healthy_s": (fault["healthy"] - fault["started"]) / 1e9,
        "retook": fault["final"] != fault["new"],
    }


def describe(fault, f):
    text = (f"{fault['kind']}: {fault['old']} -> {fault['new']}, healthy after "
            f"{f['healthy_s']:.1f} s; {f['grants']} grants, {f['terms']} lease terms; "
            f"writes {f['accepted']} accepted, {f['refused']} refused ({f['refused_paused']} "
            f"the paused holder's, {f['refused_deposed']} from the deposed primary after the "
            f"promotion); {f['late']} grants on the old primary after the promotion "
            f"({f['late_haproxy']} through HAProxy)")
    if f["skip"] is not None:
        text += f", first new token - last old = {f['skip']}"
    if fault["final"] != fault["new"]:
        text += (f"; {fault['final']} took the leader key back ({fault['new']}'s timeline "
                 f"discarded)")
    text += (f", {f['reissued']} issued again; lease "
             f"{'renewed on the new primary' if f['lease_survived'] else 'not renewed there'}, "
             f"{f['lease_overlaps']} overlapping terms; checker "
             f"{', '.join(f'{k} {n}' for k, n in sorted(f['violations'].items())) or 'clean'}")
    return text


def analyse(report, mode, fault, trial, resource, died):
    """Checks one trial; its figures go to report.trials."""
    summary = check_trial(f"{trial.directory}.history", [w.history for w in trial.workers],
                          commits(resource.dsn, trial.row_base, ROWS))
    kinds = {} if summary is None else summary["violations"]
    f = figures(fault, trial, events_of(trial), kinds)
    f["kind"], f["summary"] = fault["kind"], describe(fault, f)
    report.trials.append(f)
    label = f"{fault['kind']} (t{trial.number})"
    report.check(f"{label}: the checker read the history", summary is not None,
                 "" if summary else "unreadable")
    report.check(f"{label}: no worker died", not died, f"died: {died}")
    harm = harm_of(kinds)
    if mode.control == "measure":
        report.check(f"{label}: nothing harmful reached the resource", harm == 0,
                     f"checker: {kinds}")
        return
    if mode.control == "harm":
        if fault["kind"] in CONTROLLED:
            report.check(f"{label}: the control fails fenced_lock's checks (harm at the "
                         f"resource or a token granted twice)",
                         harm > 0 or kinds.get("token_repeated"),
                         f"checker: {kinds}, {f['reissued']} tokens issued again")
        return
    report.check(f"{label}: nothing harmful reached the resource", harm == 0 and not (
        summary or {}).get("undecided"), f"checker: {kinds}")
    report.check(f"{label}: no token granted twice", not kinds.get("token_repeated"),
                 f"{kinds.get('token_repeated', 0)} repeated; {f['reissued']} of the old "
                 f"primary's issued again by the new")
    if fault["kind"] not in SPLIT_BRAIN:
        report.check(f"{label}: each key's tokens are a linearizable rising counter",
                     not kinds.get("tokens_not_linearizable"), f"checker: {kinds}")
        report.check(f"{label}: the paused holder's late write was refused (the fault "
                     f"reached its window)", f["refused_paused"] > 0,
                     f"{f['refused_paused']} refused, paused "
                     f"{trial.paused and trial.paused['token']}")
    else:
        report.check(f"{label}: clients on both sides: the deposed primary's grants after the "
                     f"promotion were refused at the resource", f["refused_deposed"] > 0,
                     f"{f['late']} grants there, {f['refused_deposed']} writes refused")
    report.check(f"{label}: the lease held at the fault was renewed on the new primary",
                 f["lease_held"] and f["lease_survived"],
                 f"held {f['lease_held']}, renewed {f['lease_survived']}")
    if mode.synchronous:
        report.check(f"{label}: synchronous replication: no two lease terms overlap",
                     f["lease_overlaps"] == 0, f"{f['lease_overlaps']} overlaps")
    haproxy = any(w.name.startswith("h") for w in trial.workers)
    report.check(f"{label}: clients (HAProxy's too) and the lease holder write again once "
                 f"healthy", f["live_clients"] > 0 and (f["live_haproxy"] > 0 or not haproxy)
                 and f["live_lease"] > 0, f"{f['live_clients']} client writes ("
                 f"{f['live_haproxy']} through HAProxy), {f['live_lease']} lease writes accepted")


def control_harmed(report):
    """A control's check over its faults: harm at the resource at one of them at least (the
    checker sees a repeated token reach the resource, not only the lock server)."""
    harmed = [f for f in report.trials if f["kind"] in CONTROLLED and harm_of(f["violations"])]
    report.check("the control shows harm at the resource (a stale write accepted, one token "
                 "from two holders, a lost update) at one of its faults at least", harmed,
                 f"harm at {len(harmed)} of {len(report.trials)} faults")
