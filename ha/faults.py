"""The faults, each done to the current primary of a healthy cluster. Each returns what it did
and waits until the cluster is healthy again (a leader, two replicas on its timeline)."""

import os
import signal
import time

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
    return wait_for(f"a leader other than {old.name}", lambda: (
        (leader := cluster.leader()) is not None and leader is not old and leader), timeout)


def switchover(cluster, leader):
    target = candidate(cluster, leader)
    result = cluster.patronictl("switchover", "--leader", leader.name, "--candidate",
                                target.name, "--force")
    if result.returncode != 0:
        raise RuntimeError(f"switchover failed: {result.stdout}{result.stderr}")
    return new_leader(cluster, leader)


def failover(cluster, leader):
    target = candidate(cluster, leader)
    result = cluster.patronictl("failover", "--candidate", target.name, "--force")
    if result.returncode != 0:
        raise RuntimeError(f"failover failed: {result.stdout}{result.stderr}")
    return new_leader(cluster, leader)


def crash_postmaster(cluster, leader):
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


def lose_node_fault(cluster, leader):
    return rejoin(cluster, lose_node(cluster, leader))


def freeze_patroni(cluster, leader):
    """SIGSTOP of the primary's Patroni until a replica is promoted: its PostgreSQL keeps
    accepting writes, so two writable primaries exist until the thawed Patroni demotes it."""
    pids = leader.patroni_pids()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        promoted = new_leader(cluster, leader, timeout=PATRONI_TTL * 6)
    finally:
        for pid in reversed(pids):
            os.kill(pid, signal.SIGCONT)
    return promoted


def cut_from_dcs(cluster, leader):
    """The primary's Patroni loses etcd (its proxy resets every connection): it demotes its
    server, and a replica takes the leader key once it expires."""
    leader.dcs_proxy.cut()
    try:
        promoted = new_leader(cluster, leader)
        wait_for(f"{leader.name} demoted", lambda: not writable(leader), RECOVERY_TIMEOUT)
    finally:
        leader.dcs_proxy.restore()
    return promoted


def lagging_failover(cluster, leader):
    """Asynchronous mode: the replicas lose their link to the primary (its replication proxy
    is cut) while it goes on handing out tokens, until its token sequence has moved, so that
    some of them are in WAL no replica has; then the node is lost. Patroni promotes a replica
    within maximum_lag_on_failover; the old primary is rewound when it comes back."""
    leader.replication_proxy.cut()
    try:
        start = sequence_position(leader)
        wait_for("the primary's token sequence to move past the replicas",
                 lambda: sequence_position(leader) > start, 60, interval=0.1)
        # Tokens from the new block reach the clients.
        time.sleep(0.5)
        lose_node(cluster, leader)
    finally:
        leader.replication_proxy.restore()
    return rejoin(cluster, leader)


def sequence_position(node):
    with psycopg2.connect(node.dsn(), connect_timeout=2) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT last_value FROM fencing_token_seq")
        return cursor.fetchone()[0]


def writable(node):
    try:
        with psycopg2.connect(node.dsn(), connect_timeout=2) as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT NOT pg_is_in_recovery()")
            return cursor.fetchone()[0]
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


def run_fault(cluster, kind):
    leader = cluster.leader()
    timeline = leader.rest()["timeline"]
    started = time.monotonic_ns()
    log(f"fault: {kind} (primary {leader.name})")
    promoted = FAULTS[kind](cluster, leader)
    promoted_at = time.monotonic_ns()
    cluster.wait_healthy(RECOVERY_TIMEOUT)
    healthy_at = time.monotonic_ns()
    log(f"fault: {kind} done, primary {promoted.name}, healthy after "
        f"{(healthy_at - started) / 1e9:.1f} s")
    return {"kind": kind, "old": leader.name, "new": promoted.name, "old_timeline": timeline,
            "old_port": leader.pg_port,
            "new_port": promoted.pg_port, "started": started, "promoted": promoted_at,
            "healthy": healthy_at}
