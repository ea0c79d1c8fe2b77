"""The faults, each done to the current primary of a healthy cluster. Each returns what it did
and waits until the cluster is healthy again (a leader, two replicas on its timeline)."""

import contextlib
import os
import signal
import threading
import time
import types

import psycopg2

from cluster import PATRONI_TTL, log, wait_for

RECOVERY_TIMEOUT = 120


def candidate(cluster, leader):
    """The replica to move to: in synchronous mode Patroni takes only the synchronous one."""
    members = [m for m in cluster.members() if m["name"] != leader.name]
    for member in members:
        if member["role"] == "sync_standby":
            return cluster.node(member["name"])
    return cluster.node(members[0]["name"])


def new_leader(cluster, old, timeout=90):
    """The promoted node, once Patroni reports it; the time it was seen goes to
    cluster.promoted_at (a fault may go on after it: a frozen Patroni stays frozen)."""
    promoted = wait_for(f"a leader other than {old.name}", lambda: (
        (leader := cluster.leader()) is not None and leader is not old and leader), timeout)
    cluster.promoted_at = time.monotonic_ns()
    return promoted


def switchover(cluster, leader, control):
    target = candidate(cluster, leader)
    result = cluster.patronictl("switchover", "--leader", leader.name, "--candidate",
                                target.name, "--force")
    if result.returncode != 0:
        raise RuntimeError(f"switchover failed: {result.stdout}{result.stderr}")
    return new_leader(cluster, leader)


def failover(cluster, leader, control):
    target = candidate(cluster, leader)
    result = cluster.patronictl("failover", "--candidate", target.name, "--force")
    if result.returncode != 0:
        raise RuntimeError(f"failover failed: {result.stdout}{result.stderr}")
    return new_leader(cluster, leader)


def crash_postmaster(cluster, leader, control):
    """kill -9 of the primary's postmaster: Patroni 3.0.2 restarts it in place and promotes it
    again, on a new timeline, rather than failing over."""
    timeline = leader.rest()["timeline"]
    os.kill(leader.postmaster_pid(), signal.SIGKILL)
    wait_for("the primary back on a new timeline", lambda: (
        (now := cluster.leader()) is not None and now.rest()["timeline"] > timeline
        and now.rest()["state"] == "running"), RECOVERY_TIMEOUT)
    return cluster.leader()


def lose_node(cluster, leader):
    """kill -9 of the primary's Patroni and postmaster together: the node is gone. It is
    started again once a replica has taken over, and rejoins (rewound) as a replica."""
    for pid in leader.patroni_pids():
        os.kill(pid, signal.SIGKILL)
    os.kill(leader.postmaster_pid(), signal.SIGKILL)
    return leader


def rejoin(cluster, lost):
    promoted = new_leader(cluster, lost)
    lost.runuser.wait(timeout=10)
    lost.start()
    return promoted


def lose_node_fault(cluster, leader, control):
    return rejoin(cluster, lose_node(cluster, leader))


# How long a frozen Patroni stays frozen after a replica was promoted: two writable primaries
# for several of Patroni's ttl. In a control, that time begins once the old primary has handed
# out a token above where the promoted one's sequence began (its tokens then repeat the new
# primary's; the rest of the application draws tokens until then, at most CONTROL_FROZEN_S).
FROZEN_AFTER_PROMOTION_S = 2 * PATRONI_TTL
CONTROL_FROZEN_S = 60


def freeze_patroni(cluster, leader, control):
    """SIGSTOP of the primary's Patroni until a replica is promoted and then some: its
    PostgreSQL keeps accepting writes, so two writable primaries exist until the thawed
    Patroni demotes it."""
    pids = leader.patroni_pids()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        promoted = new_leader(cluster, leader, timeout=PATRONI_TTL * 6)
        if control:
            began = sequence_position(promoted)
            with rest_of_application(leader) as drawn:
                wait_for("the old primary's tokens past the promoted one's first", lambda: (
                    drawn.highest > began), CONTROL_FROZEN_S, interval=0.05)
        time.sleep(FROZEN_AFTER_PROMOTION_S)
    finally:
        for pid in reversed(pids):
            os.kill(pid, signal.SIGCONT)
    return promoted


def cut_from_dcs(cluster, leader, control):
    """The primary's Patroni loses etcd (its proxy resets every connection): it demotes its
    server, and a replica takes the leader key once it expires."""
    leader.dcs_proxy.cut()
    try:
        promoted = new_leader(cluster, leader)
        wait_for(f"{leader.name} demoted", lambda: not writable(leader), RECOVERY_TIMEOUT)
    finally:
        leader.dcs_proxy.restore()
    return promoted


def lagging_failover(cluster, leader, control):
    """Asynchronous mode: the replicas lose their link to the primary (its replication proxy
    is cut) while it goes on handing out tokens, until it has handed out one above the replicas'
    token sequence (the rest of the application draws tokens until then), so that the tokens
    its clients get next are in WAL no replica has; then the node is lost. (The sequence's own
    position is no measure: the allocator reserves the next block at the middle of the
    current one, so the primary's sequence passes the replicas' while the tokens it hands out
    are still below it, and a promoted replica without the failover skip may then repeat
    none.) Patroni promotes a
    replica within maximum_lag_on_failover; the old primary is rewound when it comes back."""
    leader.replication_proxy.cut()
    try:
        # What was shipped before the cut is replayed by now.
        time.sleep(0.5)
        replicas = max(sequence_position(node) for node in cluster.nodes if node is not leader)
        with rest_of_application(leader) as drawn:
            wait_for("the primary's tokens to move past the replicas' sequence",
                     lambda: drawn.highest > replicas, 60, interval=0.05)
        # The clients' tokens from beyond the replicas' position reach the resource.
        time.sleep(1)
        lose_node(cluster, leader)
    finally:
        leader.replication_proxy.restore()
    return rejoin(cluster, leader)


@contextlib.contextmanager
def rest_of_application(node):
    """The rest of an application drawing tokens on `node` as fast as it can (other keys of
    a namespace of its own, 40 a transaction), so that the token sequence moves within a
    fault's window: the shared allocator reserves token_block tokens a step. Yields what it
    drew: `highest`, the largest token it was granted (0 before its first)."""
    stopped = threading.Event()
    drawn = types.SimpleNamespace(highest=0)

    def draw():
        while not stopped.is_set():
            try:
                conn = psycopg2.connect(node.dsn(), connect_timeout=2,
                                        options="-c statement_timeout=3000")
                with contextlib.closing(conn), conn.cursor() as cursor:
                    while not stopped.is_set():
                        cursor.execute("SELECT max(acquire_fenced(7003, key)) "
                                       "FROM generate_series(1, 40) key")
                        highest = cursor.fetchone()[0]
                        conn.commit()
                        drawn.highest = max(drawn.highest, highest)
            except psycopg2.Error:
                time.sleep(0.1)

    thread = threading.Thread(target=draw, daemon=True)
    thread.start()
    try:
        yield drawn
    finally:
        stopped.set()
        thread.join(timeout=10)


def sequence_position(node):
    return node.value("SELECT last_value FROM fencing_token_seq")


def writable(node):
    try:
        return node.value("SELECT NOT pg_is_in_recovery()")
    except psycopg2.Error:
        return False


FAULTS = {
    "switchover": switchover,
    "failover": failover,
    "postmaster killed": crash_postmaster,
    "node lost": lose_node_fault,
    "frozen patroni": freeze_patroni,
    "cut from etcd": cut_from_dcs,
    "lagging replica": lagging_failover,
}


# Where the primary's server goes on for a while as a primary once another node is promoted.
SPLIT_BRAIN = {"frozen patroni"}


def run_fault(cluster, kind, trial, control, faults=None):
    """Does `kind` to the primary while the trial's client pinned to it is paused holding a
    key (but in a split brain); resumes that client once a holder on the new primary wrote
    its key."""
    leader = cluster.leader()
    timeline, old_postmaster = cluster.timeline(leader), leader.postmaster_start()
    # In a split brain the client pinned to the old primary goes on working there instead.
    if kind not in SPLIT_BRAIN:
        trial.pause_holder(leader)
    started = time.monotonic_ns()
    log(f"fault: {kind} (primary {leader.name})")
    cluster.promoted_at = None
    promoted = (faults or FAULTS)[kind](cluster, leader, control)
    promoted_at = cluster.promoted_at or time.monotonic_ns()
    trial.resume_holder()
    cluster.wait_healthy(RECOVERY_TIMEOUT)
    healthy_at = time.monotonic_ns()
    # Whom Patroni left as the leader: at a split brain, the deposed primary may take the
    # leader key back once thawed (Patroni 3.0.2's etcd3 section), and the promoted node's
    # timeline is discarded.
    final = cluster.leader()
    log(f"fault: {kind} done, primary {promoted.name}, healthy after "
        f"{(healthy_at - started) / 1e9:.1f} s")
    return {"kind": kind, "old": leader.name, "new": promoted.name, "old_timeline": timeline,
            "old_postmaster": old_postmaster,
            "old_port": leader.pg_port,
            "new_port": promoted.pg_port, "started": started, "promoted": promoted_at,
            "healthy": healthy_at, "final": final.name if final else None}
