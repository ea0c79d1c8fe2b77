"""What must hold after a run, checked from the clients' and leaders' logs and the resource's
own record of the writes it took."""

from collections import Counter, defaultdict

from cluster import LOOP_WAIT, PATRONI_TTL
from workload import LEASE_TTL_MS

# A new leader holds within the lease's TTL, Patroni's ttl (a replica is promoted once the old
# primary's leader key expires), one Patroni loop and this margin (rewind and restart of the
# old primary, the followers' wait in acquire_lease, reconnecting).
LEADER_MARGIN_S = 12
LEADER_BOUND_S = LEASE_TTL_MS / 1000 + PATRONI_TTL + LOOP_WAIT + LEADER_MARGIN_S


def read_client_events(paths):
    grants, writes, errors = [], [], []
    for path in paths:
        with open(path) as events:
            for line in events:
                words = line.split()
                if words[0] == "G" and len(words) == 7:
                    grants.append({"client": words[1], "key": int(words[2]),
                                   "token": int(words[3]), "port": int(words[4]),
                                   "timeline": int(words[5]), "at": int(words[6])})
                elif words[0] == "W" and len(words) == 6:
                    writes.append({"client": words[1], "key": int(words[2]),
                                   "token": int(words[3]), "accepted": words[4] == "accepted",
                                   "at": int(words[5])})
                elif words[0] == "E" and len(words) == 4:
                    errors.append({"client": words[1], "at": int(words[2]), "code": words[3]})
    return grants, writes, errors


def leader_terms(events):
    """Each lease held: (name, term) -> {"start", "end" (database clock, s), "at" (monotonic
    ns of its LEADER line)}. A leader that takes its own lease again gets the same term."""
    terms = {}
    for at, words in events:
        if words[0] == "LEADER" and len(words) >= 6:
            key = (words[1], int(words[2]))
            term = terms.setdefault(key, {"start": None, "end": None, "at": at})
            if words[4] != "?":
                start, end = float(words[4]), float(words[5])
                term["start"] = start if term["start"] is None else min(term["start"], start)
                term["end"] = end if term["end"] is None else max(term["end"], end)
        elif words[0] == "RENEW" and len(words) == 4:
            term = terms.get((words[1], int(words[2])))
            if term is not None and term["end"] is not None:
                term["end"] = max(term["end"], float(words[3]))
    return terms


def lease_overlaps(terms):
    """Pairs of different terms whose validity (acquired to last expiry) overlaps."""
    held = sorted((t["start"], t["end"], term) for (_, term), t in terms.items()
                  if t["start"] is not None)
    overlaps = []
    for i, (start, end, term) in enumerate(held):
        for later_start, later_end, later in held[i + 1:]:
            if later_start >= end:
                break
            if later != term:
                overlaps.append((term, later, round(end - later_start, 3)))
    return overlaps


def increasing_violations(tokens):
    """How many tokens in the sequence are below one that came before them."""
    highest, violations = None, 0
    for token in tokens:
        if highest is not None and token < highest:
            violations += 1
        else:
            highest = token
    return violations


# The faults that lose WAL the new primary never got, by construction (the lagging replica
# waits until the old primary's token sequence has moved past the replicas').
LOSES_WAL = {"lagging replica"}


def describe(fault, grants):
    """One fault's figures: how long until the cluster was healthy, how many tokens the old
    primary still handed out on its timeline once another node was promoted (two writable
    primaries), how far the new timeline's first token is above the old one's last (the
    failover skip; negative: tokens issued again), and how many were issued again."""
    text = (f"{fault['kind']}: {fault['old']} -> {fault['new']}, healthy after "
            f"{(fault['healthy'] - fault['started']) / 1e9:.1f} s")
    old = [g for g in grants
           if g["port"] == fault["old_port"] and g["timeline"] == fault["old_timeline"]]
    new = [g["token"] for g in grants
           if g["port"] == fault["new_port"] and g["timeline"] > fault["old_timeline"]]
    fault["late"] = sum(1 for g in old if g["at"] >= fault["promoted"])
    if fault["old"] != fault["new"]:
        text += f", {fault['late']} grants on the old primary after the promotion"
    else:
        text += ", promoted again in place"
    if old and new:
        text += f", first new token - last old = {min(new) - max(g['token'] for g in old)}"
    issued_by_old = {g["token"] for g in old}
    fault["reissued"] = sum(1 for token in new if token in issued_by_old)
    return text + f", {fault['reissued']} of the old primary's tokens issued again"


class Report:
    def __init__(self, mode):
        self.mode, self.checks, self.figures = mode, [], {}

    def check(self, name, ok, detail):
        self.checks.append((name, bool(ok), detail))

    def lines(self):
        yield f"== {self.mode}"
        for name, value in self.figures.items():
            yield f"  {name}: {value}"
        for name, ok, detail in self.checks:
            yield f"  {'ok  ' if ok else 'FAIL'} {name}: {detail}"
        passed = sum(ok for _, ok, _ in self.checks)
        yield f"ha ({self.mode}): {passed} passed, {len(self.checks) - passed} failed"


def analyse(mode, control, faults, client_paths, leader_events, resource):
    report = Report(mode)
    grants, writes, errors = read_client_events(client_paths)
    terms = leader_terms(leader_events)

    kinds = Counter(fault["kind"] for fault in faults)
    report.figures["faults done"] = ", ".join(f"{kind} {n}" for kind, n in kinds.items())
    report.figures["tokens issued"] = f"{len(grants)} to clients, {len(terms)} lease terms"
    report.figures["client writes"] = (f"{sum(w['accepted'] for w in writes)} accepted, "
                                       f"{sum(not w['accepted'] for w in writes)} refused, "
                                       f"{len(errors)} errors and reconnects")

    # No token twice: every client grant, and every lease term (once per leader).
    issued = Counter(g["token"] for g in grants)
    issued.update(term for (_, term) in terms)
    repeated = {token: n for token, n in issued.items() if n > 1}
    report.figures["tokens repeated"] = len(repeated)

    # Per key, within one server's timeline, tokens rise in grant order.
    by_server = defaultdict(list)
    for grant in sorted(grants, key=lambda g: g["at"]):
        by_server[(grant["key"], grant["port"], grant["timeline"])].append(grant["token"])
    order = sum(increasing_violations(tokens) for tokens in by_server.values())
    # Across servers a grant can come after a larger one: the deposed primary of a split brain.
    by_key = defaultdict(list)
    for grant in sorted(grants, key=lambda g: g["at"]):
        by_key[grant["key"]].append(grant["token"])
    late = sum(increasing_violations(tokens) for tokens in by_key.values())
    report.figures["grants below an earlier grant of the key (other server)"] = late

    # The resource's own record: accepted tokens per key, in the order it took them.
    stale = 0
    for (key,) in resource.query("SELECT DISTINCT key FROM writes"):
        accepted = [token for (token,) in resource.query(
            "SELECT token FROM writes WHERE key = %s AND accepted ORDER BY seq", (key,))]
        stale += increasing_violations(accepted)
    leader_fences = [fence for (fence,) in resource.query(
        "SELECT fence FROM leader_log ORDER BY seq")]
    stale_leader = increasing_violations(leader_fences)
    report.figures["stale writes accepted"] = stale + stale_leader

    overlaps = lease_overlaps(terms)
    report.figures["lease overlaps"] = (
        f"{len(overlaps)}" + (f" (longest {max(o[2] for o in overlaps)} s)" if overlaps else ""))
    work = sorted(at for at, words in leader_events
                  if words[0] == "WORK" and words[3] == "accepted")
    gaps = [(later - earlier) / 1e9 for earlier, later in zip(work, work[1:])]
    longest = max(gaps, default=0.0)
    report.figures["longest time without a leader's accepted write"] = f"{longest:.1f} s"
    superseded = sum(1 for _, words in leader_events
                     if words[0] == "WORK" and words[3] == "superseded")
    report.figures["deposed leaders' writes refused"] = superseded
    term_order = increasing_violations([term for (_, term), t in sorted(
        terms.items(), key=lambda item: item[1]["at"])])
    report.figures["lease terms granted below an earlier term"] = term_order

    for fault in faults:
        fault["summary"] = describe(fault, grants)

    if control:
        for kind in kinds:
            of_kind = [fault for fault in faults if fault["kind"] == kind]
            reissued = [fault["reissued"] for fault in of_kind]
            if kind in LOSES_WAL:
                report.check(f"the control repeats tokens at every {kind} (the fault reaches "
                             f"the window the skip closes)", all(reissued),
                             f"tokens issued again per fault: {reissued}")
            else:
                # Two writable primaries: the old one's tokens after the promotion repeat the
                # new one's only once they pass what the replicated sequence had logged ahead
                # (a sequence logs 32 values ahead), which depends on where the promotion fell.
                late = [fault["late"] for fault in of_kind]
                report.check(f"the control's {kind} leaves the old primary handing out tokens "
                             f"after the promotion", all(late),
                             f"grants after the promotion per fault: {late}; tokens issued "
                             f"again: {reissued}")
        return report

    report.check("no token is returned twice", not repeated,
                 f"{len(repeated)} repeated" + (f", e.g. {sorted(repeated)[:3]}"
                                                if repeated else ""))
    report.check("per key and server timeline, tokens rise in grant order", order == 0,
                 f"{order} out of order")
    report.check("the resource accepted no write below one it had accepted", stale == 0,
                 f"{stale} stale client writes accepted")
    report.check("the leaders' resource accepted no term below an accepted one",
                 stale_leader == 0, f"{stale_leader} stale leader writes accepted")
    if mode.startswith("synchronous"):
        report.check("synchronous mode: no two leases overlap", not overlaps,
                     f"{len(overlaps)} overlaps {overlaps[:3]}")
        report.check("synchronous mode: lease terms rise in the order they were granted",
                     term_order == 0, f"{term_order} granted below an earlier term")
    report.check(f"a leader writes again within {LEADER_BOUND_S:.0f} s of any fault",
                 longest <= LEADER_BOUND_S, f"longest gap {longest:.1f} s")
    led_after = all(any(at > fault["healthy"] for at in work) for fault in faults)
    report.check("after every fault a new leader holds", led_after and bool(work),
                 f"{len(work)} accepted leader writes")
    report.check("clients got tokens throughout", len(grants) > 100 * max(1, len(faults)),
                 f"{len(grants)} grants")
    return report
