"""fenced_lock under a second HA manager: Debian's pg_auto_failover 2.0 (`pg_autoctl`), a
monitor and two PostgreSQL 15 nodes with fenced_lock preloaded, run as `postgres`, with the
same workload, history and checks as the Patroni cluster (cluster.py). Its state lives in the
run's directory (pg_autoctl's XDG directories point there, not at postgres' home)."""

import os
import signal
import subprocess
import time

import psycopg2

from cluster import PG_BIN, PostgresNode, chown_postgres, multi_host_dsn
from faults import new_leader
from real_parts import free_ports, log, stop_pid, wait_for

# The monitor's timing, scaled down from its defaults (a 5 s health check, a node unhealthy
# after 20 s) as Patroni's is, so that a failover takes seconds.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": 1000,
    "pgautofailover.health_check_timeout": 1000,
    "pgautofailover.health_check_max_retries": 1,
    "pgautofailover.health_check_retry_delay": 500,
    "pgautofailover.node_considered_unhealthy_timeout": 5000,
    "pgautofailover.primary_demote_timeout": 10000,
}
RECOVERY_TIMEOUT = 120
# How long the secondary's WAL receiver stays stopped before the primary is lost.
LAG_S = 3


class Monitor(PostgresNode):
    """The monitor's own PostgreSQL server (the pgautofailover extension's)."""

    def __init__(self, directory):
        self.data = os.path.join(directory, "monitor", "data")
        os.makedirs(os.path.dirname(self.data), exist_ok=True)
        self.pg_port, = free_ports(1)


class AutoFailoverNode(PostgresNode):
    def __init__(self, cluster, name):
        self.cluster, self.name = cluster, name
        self.directory = os.path.join(cluster.directory, name)
        self.data = os.path.join(self.directory, "data")
        self.pg_port, = free_ports(1)
        self.keeper = None

    def create(self, first):
        """The first node's data directory is made here, with fenced_lock preloaded; the
        second is a base backup of the first (its postgresql.conf with it)."""
        os.makedirs(self.directory, exist_ok=True)
        if first:
            chown_postgres(self.directory)
            subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/initdb", "-D",
                            self.data, "-U", "postgres", "--auth", "trust", "-E", "UTF8",
                            "--locale", "C"], check=True, capture_output=True,
                           cwd=self.directory)
            with open(os.path.join(self.data, "postgresql.conf"), "a") as conf:
                conf.write(f"shared_preload_libraries = 'fenced_lock'\n"
                           f"unix_socket_directories = '{self.cluster.sockets}'\n" + "".join(
                               f"{name} = {value}\n"
                               for name, value in self.cluster.parameters.items()))
        self.keeper = self.cluster.autoctl(
            f"keeper-{self.name}", "create", "postgres", "--pgdata", self.data,
            "--pgport", str(self.pg_port), "--hostname", "127.0.0.1", "--name", self.name,
            "--pghost", self.cluster.sockets, "--listen", "127.0.0.1",
            "--auth", "trust", "--no-ssl", "--pgctl", f"{PG_BIN}/pg_ctl",
            "--monitor", self.cluster.monitor_uri, "--run")

    def restart(self):
        self.keeper = self.cluster.autoctl(f"keeper-{self.name}", "run", "--pgdata",
                                           self.data)

    def kill_keeper(self, sig):
        """Signals the keeper's whole process group (runuser, pg_autoctl and the services it
        supervises: spawned in a session of their own)."""
        if self.keeper is not None:
            stop_group(self.keeper, sig)

    def stop(self):
        self.kill_keeper(signal.SIGINT)
        pid = self.postmaster_pid()
        if pid:
            stop_pid(pid, sig=signal.SIGINT)


def stop_group(process, sig):
    """Signals `process`'s process group and waits for `process` (SIGKILL to the group after
    30 s)."""
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class AutoFailoverCluster:
    """A monitor and two nodes. The same interface as cluster.Cluster for the workload, the
    faults and the checks: nodes, kv_dsn, leader, timeline, wait_healthy."""

    dcs = "pg_auto_failover"
    haproxy = None

    def __init__(self, processes, directory, synchronous, parameters=None):
        self.processes, self.directory = processes, directory
        self.synchronous, self.parameters = synchronous, parameters or {}
        self.promoted_at = None
        self.state = os.path.join(directory, "pg_autoctl")
        for sub in ("config", "data", "run"):
            os.makedirs(os.path.join(self.state, sub), exist_ok=True)
        # Both nodes' sockets (the second node's configuration is a copy of the first's).
        self.sockets = os.path.join(directory, "sockets")
        os.makedirs(self.sockets, exist_ok=True)
        self.monitor_server = Monitor(directory)
        self.monitor_uri = (f"postgres://autoctl_node@127.0.0.1:{self.monitor_server.pg_port}/"
                            f"pg_auto_failover?sslmode=disable")
        self.nodes = [AutoFailoverNode(self, f"a{i}") for i in (1, 2)]
        self.monitor = None
        processes.cleanups.append(self.stop)

    def command(self, *argv):
        """pg_autoctl as postgres, its state under the run's directory."""
        chown_postgres(self.directory)
        return ["runuser", "-u", "postgres", "--", "env", f"XDG_CONFIG_HOME={self.state}/config",
                f"XDG_DATA_HOME={self.state}/data", f"XDG_RUNTIME_DIR={self.state}/run",
                "pg_autoctl", *argv]

    def autoctl(self, name, *argv):
        """A pg_autoctl service (the monitor, a node's keeper), a process of the run."""
        return self.processes.spawn(name, self.command(*argv))

    def autoctl_now(self, *argv):
        """A pg_autoctl command that ends (show, perform), its output."""
        return subprocess.run(self.command(*argv), capture_output=True, text=True,
                              timeout=120)

    def start(self):
        self.monitor = self.autoctl(
            "monitor", "create", "monitor", "--pgdata", self.monitor_server.data, "--pgport",
            str(self.monitor_server.pg_port), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
            "--auth", "trust", "--no-ssl",
            "--pgctl", f"{PG_BIN}/pg_ctl", "--run")
        wait_for("the monitor", lambda: self.query_monitor("SELECT 1"), 60, interval=0.5)
        self.query_monitor("; ".join(f"ALTER SYSTEM SET {name} = {value}"
                                     for name, value in MONITOR_SETTINGS.items()), many=True)
        self.query_monitor("SELECT pg_reload_conf()")
        first, second = self.nodes
        first.create(first=True)
        wait_for("the first node, primary", lambda: self.states().get(first.name) == (
            "single", "single"), 90, interval=0.5)
        with psycopg2.connect(first.dsn()) as conn:
            conn.autocommit = True
            conn.cursor().execute("CREATE EXTENSION IF NOT EXISTS fenced_lock")
        conn.close()
        second.create(first=False)
        self.wait_healthy(180)
        log(f"pg_auto_failover: primary {self.leader().name}, nodes on ports "
            f"{[node.pg_port for node in self.nodes]}")

    def query_monitor(self, sql, many=False):
        conn = psycopg2.connect(self.monitor_server.dsn("pg_auto_failover"), connect_timeout=2)
        conn.autocommit = True
        try:
            cursor = conn.cursor()
            for statement in (sql.split("; ") if many else [sql]):
                cursor.execute(statement)
            return cursor.fetchall() if cursor.description else True
        finally:
            conn.close()

    def states(self):
        """Each node's (reported state, goal state) on the monitor."""
        return {name: (reported, goal) for name, reported, goal in self.query_monitor(
            "SELECT nodename, reportedstate, goalstate FROM pgautofailover.node")}

    def kv_dsn(self):
        return multi_host_dsn(self.nodes)

    def leader(self):
        try:
            # wait_primary: writable, its secondary not caught up (yet).
            for name, (reported, goal) in self.states().items():
                if reported == goal and reported in ("primary", "wait_primary"):
                    return self.node(name)
        except psycopg2.Error:
            pass
        return None

    def node(self, name):
        return next(node for node in self.nodes if node.name == name)

    @staticmethod
    def timeline(node):
        return node.value("SELECT ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), "
                          "1, 8))::bit(32)::int")

    def wait_healthy(self, timeout):
        """One primary and one secondary, as the monitor sees them and wants them, and the
        primary writable."""
        def healthy():
            states = sorted(self.states().values())
            return (states == [("primary", "primary"), ("secondary", "secondary")] and
                    self.leader().value("SELECT NOT pg_is_in_recovery()"))
        wait_for("a healthy pg_auto_failover formation", healthy, timeout, interval=0.5)

    def stop(self):
        for node in self.nodes:
            node.stop()
        if self.monitor is not None:
            stop_group(self.monitor, signal.SIGINT)
        # The monitor's own server, should pg_autoctl have left it running.
        pid = self.monitor_server.postmaster_pid()
        if pid:
            stop_pid(pid, sig=signal.SIGINT)


def perform(cluster, what):
    result = cluster.autoctl_now("perform", what, "--pgdata", cluster.monitor_server.data,
                                 "--wait", "90")
    if result.returncode != 0:
        raise RuntimeError(f"perform {what} failed: {result.stdout}{result.stderr}")


def switchover(cluster, leader, control):
    perform(cluster, "switchover")
    return new_leader(cluster, leader)


def failover(cluster, leader, control):
    perform(cluster, "failover")
    return new_leader(cluster, leader)


def crash_postmaster(cluster, leader, control):
    """kill -9 of the primary's postmaster: its keeper starts it again, on the same timeline
    (crash recovery, no promotion), unless the monitor fails over first."""
    os.kill(leader.postmaster_pid(), signal.SIGKILL)
    wait_for("the primary's postmaster started again", lambda: (
        leader.postmaster_pid() is not None), RECOVERY_TIMEOUT)
    cluster.wait_healthy(RECOVERY_TIMEOUT)
    return cluster.leader()


def lose_node(cluster, leader, control, then=None):
    """kill -9 of the primary's keeper and postmaster: the monitor promotes the secondary once
    the node is unhealthy (`then` runs once the node is gone); the node's keeper is started
    again and it rejoins, rewound."""
    postmaster = leader.postmaster_pid()
    leader.kill_keeper(signal.SIGKILL)
    os.kill(postmaster, signal.SIGKILL)
    if then:
        then()
    promoted = new_leader(cluster, leader)
    leader.restart()
    return promoted


def lagging_secondary(cluster, leader, control):
    """The secondary's WAL receiver stopped (SIGSTOP) while clients work, so that it lags;
    then the primary's node is lost. pg_auto_failover replicates synchronously by default:
    the primary's commits (and its allocator's token blocks) wait, and the secondary is
    promoted with every token that was returned."""
    secondary = next(node for node in cluster.nodes if node is not leader)
    receiver = secondary.value("SELECT pid FROM pg_stat_wal_receiver")
    os.kill(receiver, signal.SIGSTOP)
    try:
        time.sleep(LAG_S)
        promoted = lose_node(cluster, leader, control, then=lambda: os.kill(
            receiver, signal.SIGCONT))
    finally:
        try:
            os.kill(receiver, signal.SIGCONT)
        except ProcessLookupError:
            pass
    return promoted


FAULTS = {"switchover": switchover, "failover": failover, "postmaster killed": crash_postmaster,
          "node lost": lose_node, "lagging secondary": lagging_secondary}
