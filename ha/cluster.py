"""The systems the HA suite runs, all real and started here: three etcd members, a TCP proxy per
Patroni node in front of them (to cut one node off from the DCS), three Patroni nodes managing
PostgreSQL 15 with fenced_lock preloaded, and a PostgreSQL server outside the cluster holding
the fenced resource. Everything lives under one directory and is stopped by pid."""

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import urllib.request

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from real_parts import Etcd, Processes, Proxy, free_ports, log, running, stop_pid, wait_for  # noqa: E402,F401
PG_BIN = "/usr/lib/postgresql/15/bin"
# Patroni's timing, scaled down from its defaults (ttl 30, loop_wait 10, retry_timeout 10) so
# that a fault resolves in seconds; Patroni requires ttl >= loop_wait + 2 * retry_timeout.
PATRONI_TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 2, 3


def chown_postgres(path):
    user = pwd.getpwnam("postgres")
    for directory, _, files in os.walk(path):
        os.chown(directory, user.pw_uid, user.pw_gid)
        for name in files:
            os.chown(os.path.join(directory, name), user.pw_uid, user.pw_gid)


class PostgresNode:
    """A PostgreSQL server an HA manager runs (`pg_port`, `data`), as clients reach it."""

    def dsn(self, dbname="postgres"):
        return f"host=127.0.0.1 port={self.pg_port} user=postgres dbname={dbname}"

    def pinned_dsn(self):
        """A client that always connects to this node, whatever its role now."""
        return self.dsn() + " connect_timeout=2"

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as pidfile:
                pid = int(pidfile.readline())
        except (OSError, ValueError):
            return None
        return pid if running(pid) else None

    def value(self, sql):
        """The first column of the first row `sql` returns on this server."""
        conn = psycopg2.connect(self.dsn(), connect_timeout=2)
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql)
                return cursor.fetchone()[0]
        finally:
            conn.close()

    def postmaster_start(self):
        """When its postmaster started (microseconds since the epoch), as the workers'
        histories record the server that answered."""
        return self.value("SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)"
                          "::bigint")


def multi_host_dsn(nodes):
    """What clients of an HA cluster use: every node, the writable one chosen at connect time
    (libpq and rust-postgres read the same keywords; `pg_autoctl show uri` gives the same)."""
    hosts = ",".join("127.0.0.1" for _ in nodes)
    ports = ",".join(str(node.pg_port) for node in nodes)
    return (f"host={hosts} port={ports} user=postgres dbname=postgres "
            f"target_session_attrs=read-write connect_timeout=2")


class Node(PostgresNode):
    """One Patroni node and the PostgreSQL it manages, run as `postgres`."""

    def __init__(self, processes, directory, name, etcd, parameters, synchronous, dcs):
        self.processes, self.name = processes, name
        self.directory = os.path.join(directory, name)
        self.pg_port, self.rest_port = free_ports(2)
        # Between this node's Patroni and etcd, so that this node alone can lose the DCS; with
        # `use_proxies: true`, Patroni talks to these addresses only, never to the members it
        # would discover.
        self.dcs_proxy = Proxy(processes, f"dcs-{name}", etcd.client_ports)
        # The address the other nodes replicate from (Patroni's connect_address), so that the
        # replication link alone can be cut; clients connect to pg_port directly.
        self.replication_proxy = Proxy(processes, f"replication-{name}", [self.pg_port])
        self.data = os.path.join(self.directory, "data")
        self.config = os.path.join(self.directory, "patroni.yml")
        self.runuser = None
        self.write_config(parameters, synchronous, dcs)
        processes.cleanups.append(self.stop)

    def write_config(self, parameters, synchronous, dcs):
        shutil.rmtree(self.directory, ignore_errors=True)
        os.makedirs(self.directory)
        socket_dir = os.path.join(self.directory, "sock")
        os.makedirs(socket_dir)
        config = {
            "scope": "fenced-lock-ha",
            "name": self.name,
            "restapi": {"listen": f"127.0.0.1:{self.rest_port}",
                        "connect_address": f"127.0.0.1:{self.rest_port}"},
            dcs: {"hosts": [f"127.0.0.1:{port}" for port in self.dcs_proxy.ports],
                  "use_proxies": True},
            "bootstrap": {
                "dcs": {
                    "ttl": PATRONI_TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": synchronous,
                    "postgresql": {"use_pg_rewind": True, "use_slots": True},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_port}",
                "connect_address": f"127.0.0.1:{self.replication_proxy.ports[0]}",
                "data_dir": self.data,
                "bin_dir": PG_BIN,
                "pgpass": os.path.join(self.directory, "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                # Preloaded, as fenced_lock's shared allocator and failover skip need.
                "parameters": {"shared_preload_libraries": "fenced_lock",
                               "unix_socket_directories": socket_dir,
                               "max_connections": 50, "shared_buffers": "32MB",
                               "wal_keep_size": "64MB", **parameters},
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication replicator 127.0.0.1/32 trust"],
            },
            "tags": {"nofailover": False, "noloadbalance": False},
        }
        # JSON is YAML: no YAML writer needed.
        with open(self.config, "w") as out:
            json.dump(config, out, indent=1)
        chown_postgres(self.directory)

    def start(self):
        self.runuser = self.processes.spawn(
            f"patroni-{self.name}", ["runuser", "-u", "postgres", "--", "patroni", self.config])

    def patroni_pids(self):
        """runuser's pid and Patroni's (runuser forks it): a freeze must stop both."""
        if self.runuser is None or self.runuser.poll() is not None:
            return []
        children = subprocess.run(["pgrep", "-P", str(self.runuser.pid)],
                                  capture_output=True, text=True).stdout.split()
        return [self.runuser.pid] + [int(pid) for pid in children]

    def rest(self, path="patroni"):
        return json.load(urllib.request.urlopen(
            f"http://127.0.0.1:{self.rest_port}/{path}", timeout=1))

    def stop(self):
        """Patroni (which stops its server), then the server should it still run."""
        for pid in reversed(self.patroni_pids()):
            stop_pid(pid, timeout=30)
        pid = self.postmaster_pid()
        if pid:
            stop_pid(pid, sig=signal.SIGINT)


class HAProxy:
    """Debian's HAProxy in front of the nodes, for clients without multi-host connection
    strings: a node takes connections while Patroni's REST API answers 200 to GET /primary
    (Patroni's documented HAProxy set-up, its timing scaled down as Patroni's is), and its
    sessions are closed when it stops answering."""

    def __init__(self, processes, directory, nodes):
        self.port, = free_ports(1)
        self.config = os.path.join(directory, "haproxy.cfg")
        servers = "\n".join(f"    server {node.name} 127.0.0.1:{node.pg_port} check port "
                            f"{node.rest_port}" for node in nodes)
        with open(self.config, "w") as out:
            out.write(f"""global
    maxconn 200
defaults
    mode tcp
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 1s
listen primary
    bind 127.0.0.1:{self.port}
    option httpchk
    http-check send meth GET uri /primary
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
{servers}
""")
        processes.spawn("haproxy", ["haproxy", "-db", "-f", self.config])

    def dsn(self):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=2"


class Cluster:
    """Three Patroni nodes on etcd, through Patroni's `dcs` section (`etcd`: the v2 API;
    `etcd3`: v3 through the gRPC gateway), and HAProxy in front of them. `parameters` go into
    every node's postgresql.conf."""

    def __init__(self, processes, directory, synchronous, parameters=None, dcs="etcd"):
        self.processes, self.synchronous = processes, synchronous
        self.directory = directory
        self.etcd = Etcd(processes, directory)
        self.etcd.start()
        self.nodes = [Node(processes, directory, f"n{i}", self.etcd, parameters or {},
                           synchronous, dcs) for i in (1, 2, 3)]
        self.haproxy = HAProxy(processes, directory, self.nodes)
        # patronictl talks to etcd directly: it must work while a node's proxy is cut.
        self.ctl_config = os.path.join(directory, "patronictl.yml")
        with open(self.ctl_config, "w") as out:
            json.dump({"scope": "fenced-lock-ha", dcs: {"hosts": [
                f"127.0.0.1:{port}" for port in self.etcd.client_ports]}}, out)

    def start(self):
        for node in self.nodes:
            node.start()
        self.wait_healthy(120)
        leader = self.leader()
        with psycopg2.connect(leader.dsn()) as conn:
            conn.autocommit = True
            conn.cursor().execute("CREATE EXTENSION IF NOT EXISTS fenced_lock")
        log(f"patroni: leader {leader.name}, {'synchronous' if self.synchronous else 'asynchronous'}"
            f" mode, PostgreSQL on ports {[node.pg_port for node in self.nodes]}")

    def kv_dsn(self):
        return multi_host_dsn(self.nodes)

    @staticmethod
    def timeline(node):
        return node.rest()["timeline"]

    def members(self):
        for node in self.nodes:
            try:
                return node.rest("cluster")["members"]
            except Exception:
                continue
        return []

    def leader(self):
        for member in self.members():
            if member["role"] == "leader" and member["state"] == "running":
                return self.node(member["name"])
        return None

    def node(self, name):
        return next(node for node in self.nodes if node.name == name)

    def wait_healthy(self, timeout):
        """A leader and two replicas on its timeline (one of them the synchronous standby in
        synchronous mode), the leader writable and both replicas streaming from it."""
        def healthy():
            members = self.members()
            leaders = [m for m in members if m["role"] == "leader" and m["state"] == "running"]
            replicas = [m for m in members if m["role"] in ("replica", "sync_standby")
                        and m["state"] in ("running", "streaming")
                        and m.get("timeline") == leaders[0].get("timeline")] if leaders else []
            if len(leaders) != 1 or len(replicas) != 2:
                return False
            if self.synchronous and not any(m["role"] == "sync_standby" for m in members):
                return False
            with psycopg2.connect(self.node(leaders[0]["name"]).dsn(), connect_timeout=2) as c:
                cursor = c.cursor()
                cursor.execute("SELECT NOT pg_is_in_recovery(), (SELECT count(*) FROM "
                               "pg_stat_replication WHERE state = 'streaming')")
                writable, streaming = cursor.fetchone()
                return writable and streaming == 2
        wait_for("a healthy cluster", healthy, timeout, interval=0.5)

    def patronictl(self, *args):
        return subprocess.run(["patronictl", "-c", self.ctl_config, *args],
                              capture_output=True, text=True, timeout=60)
