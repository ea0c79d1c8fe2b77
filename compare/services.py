"""The lock services and the resource, all real, started here under one directory and stopped
by pid: Redis (one for the single-instance lock, five for Redlock) without persistence, a
Redis primary with a replica and three Sentinels for the failover trials, etcd 3.4 (three
members), the PostgreSQL 15 lock server (fenced_lock preloaded), a PostgreSQL primary with a
standby for the failover trials, and the resource's PostgreSQL server, all through
scripts/pg.sh."""

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request

import psycopg2
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from real_parts import (Etcd, Processes, Proxy, dsn_of, free_ports, pg, pg_stop,  # noqa: E402
                        socket_of, stop_pid, wait_for)

REDLOCK_NODES = 5
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# Built by compare/run.sh from compare/faketime_shim.c.
FAKETIME_SHIM = os.path.join(ROOT, "build/compare/faketime_shim.so")
PRELOAD = "shared_preload_libraries=fenced_lock"


class Clock:
    """A clock of its own for a server started through libfaketime: `jump(seconds)` moves its
    wall clock (not its monotonic clock) from the real time."""

    def __init__(self, directory, name):
        self.path = os.path.join(directory, f"{name}.clock")
        self.jump(0)

    def jump(self, seconds):
        with open(self.path, "w") as offset:
            offset.write(f"{seconds:+d}\n")

    def environment(self):
        return dict(os.environ, LD_PRELOAD=f"{FAKETIME_SHIM}:{LIBFAKETIME}",
                    FAKETIME_TIMESTAMP_FILE=self.path, FAKETIME_NO_CACHE="1",
                    FAKETIME_DONT_FAKE_MONOTONIC="1")


class RedisServer:
    """Redis 7 as a cache is run: no RDB snapshots, no AOF, so a restart forgets every key. On
    a Unix socket, and on `port` of 127.0.0.1 when given (Sentinel speaks TCP only)."""

    def __init__(self, processes, directory, name, port=0, options=()):
        self.processes, self.name, self.port, self.options = processes, name, port, options
        self.directory = os.path.join(directory, name)
        self.socket = os.path.join(self.directory, "redis.sock")
        self.process = None
        self.start()

    def start(self, clock=None):
        """Started empty; through libfaketime on `clock` when given."""
        shutil.rmtree(self.directory, ignore_errors=True)
        os.makedirs(self.directory)
        self.process = self.processes.spawn(self.name, [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--unixsocket", self.socket, "--unixsocketperm", "700", "--save", "",
            "--appendonly", "no", "--dir", self.directory, *self.options],
            env=clock.environment() if clock else None)
        wait_for(f"{self.name}", self.client().ping, 30)

    def client(self):
        return redis.Redis(unix_socket_path=self.socket)

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def restart(self, clock=None):
        """kill -9 and start again, empty."""
        self.kill()
        self.start(clock)


class RedisWithSentinels:
    """A Redis primary, one replica that replicates through a proxy (so that a trial can hold
    its replication back) and three Sentinels (quorum 2) that promote the replica when the
    primary is down for 1 s, as Redis' documentation sets them up."""

    SERVICE = "fenced-compare"

    def __init__(self, processes, directory, name):
        self.processes = processes
        self.directory = os.path.join(directory, name)
        primary_port, replica_port, *sentinel_ports = free_ports(5)
        self.primary = RedisServer(processes, self.directory, "primary", primary_port)
        self.link = Proxy(processes, f"{name}-replication", [primary_port])
        self.replica = RedisServer(processes, self.directory, "replica", replica_port,
                                   ["--replicaof", "127.0.0.1", str(self.link.ports[0])])
        wait_for("the Redis replica's link", lambda: self.replica.client().info(
            "replication")["master_link_status"] == "up", 30)
        self.sentinel_ports, self.sentinels = sentinel_ports, []
        for i, port in enumerate(sentinel_ports, 1):
            config = os.path.join(self.directory, f"sentinel{i}.conf")
            with open(config, "w") as out:
                out.write(f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                          f"sentinel monitor {self.SERVICE} 127.0.0.1 {primary_port} 2\n"
                          f"sentinel down-after-milliseconds {self.SERVICE} 1000\n"
                          f"sentinel failover-timeout {self.SERVICE} 10000\n")
            self.sentinels.append(processes.spawn(f"{name}-sentinel{i}",
                                                  ["redis-sentinel", config]))
        for port in sentinel_ports:
            sentinel = redis.Redis(port=port)
            wait_for(f"Sentinel {port} to know its peers and the replica",
                     lambda sentinel=sentinel: len(sentinel.sentinel_sentinels(self.SERVICE)) == 2
                     and len(sentinel.sentinel_slaves(self.SERVICE)) == 1, 30)

    def values(self):
        return {"sentinels": [["127.0.0.1", port] for port in self.sentinel_ports],
                "service": self.SERVICE}

    def hold_back(self):
        """Replication stops from now on (its link blackholed)."""
        self.link.blackhole()

    def fail(self):
        """The primary is killed; the Sentinels promote the replica."""
        self.primary.kill()

    def stop(self):
        for process in [*self.sentinels, self.replica.process, self.primary.process]:
            stop_pid(process.pid)
            process.wait()
        self.link.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class PostgresWithStandby:
    """A PostgreSQL 15 primary (a copy of the template: fenced_lock and the by-hand sequence
    created) and a hot standby streaming from it through a proxy, synchronous
    (`synchronous_standby_names = '*'`) or not; fenced_lock preloaded on both. The harness is
    the HA manager: it promotes the standby when the primary is gone."""

    def __init__(self, processes, directory, name, template, synchronous):
        self.primary_dir = os.path.join(directory, f"{name}-primary")
        self.standby_dir = os.path.join(directory, f"{name}-standby")
        for server in (self.primary_dir, self.standby_dir):
            shutil.rmtree(server, ignore_errors=True)
        os.makedirs(self.primary_dir)
        subprocess.run(["cp", "-a", os.path.join(template, "data"), self.primary_dir],
                       check=True)
        pg("start", self.primary_dir, "-c", PRELOAD,
           "-c", f"synchronous_standby_names={'*' if synchronous else ''}")
        self.link = Proxy(processes, f"{name}-replication",
                          [os.path.join(socket_of(self.primary_dir), ".s.PGSQL.5432")])
        pg("standby", self.standby_dir, self.primary_dir, "-c", PRELOAD, "-c",
           f"primary_conninfo='host=127.0.0.1 port={self.link.ports[0]} user=postgres'")
        expected = "sync" if synchronous else "async"
        with psycopg2.connect(dsn_of(self.primary_dir)) as conn:
            cursor = conn.cursor()

            def streaming():
                cursor.execute("SELECT sync_state FROM pg_stat_replication "
                               "WHERE state = 'streaming'")
                return cursor.fetchone() == (expected,)
            wait_for("the standby to stream", streaming, 30)
        conn.close()

    def values(self):
        return {"lock_dsn": dsn_of(self.primary_dir, self.standby_dir,
                                   target_session_attrs="read-write", connect_timeout=2)}

    def hold_back(self):
        """Replication stops from now on (its link blackholed)."""
        self.link.blackhole()

    def fail(self):
        """The primary crashes (immediate stop); the standby is promoted."""
        pg("crash", self.primary_dir)
        pg("promote", self.standby_dir)

    def stop(self):
        for server in (self.standby_dir, self.primary_dir):
            pg_stop(server)
        self.link.stop()
        for server in (self.primary_dir, self.standby_dir):
            shutil.rmtree(server, ignore_errors=True)


class EtcdLeader:
    """etcd's leader as the primary a failover loses. Raft commits a write on a majority
    before it answers, so there is no replication to hold back."""

    def __init__(self, etcd):
        self.etcd, self.killed = etcd, None

    def values(self):
        return {}

    def hold_back(self):
        pass

    def fail(self):
        """The leader (asked of each member in turn) is killed with -9."""
        self.killed = self.leader()
        self.etcd.members[self.killed].kill()

    def leader(self):
        for index, port in enumerate(self.etcd.client_ports):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v3/maintenance/status",
                                             data=b"{}", method="POST")
            try:
                status = json.load(urllib.request.urlopen(request, timeout=1))
            except OSError:
                continue
            if status["leader"] == status["header"]["member_id"]:
                return index
        raise RuntimeError("no etcd member says it is the leader")

    def stop(self):
        """The killed leader starts again on its data."""
        if self.killed is not None:
            self.etcd.restart(self.killed)


class Services:
    def __init__(self, directory):
        self.directory = directory
        self.processes = Processes(directory)
        self.lock_dir = os.path.join(directory, "lock")
        self.resource_dir = os.path.join(directory, "resource")
        self.template_dir = os.path.join(directory, "template")

    def start(self):
        self.redis = RedisServer(self.processes, self.directory, "redis")
        self.redlock = [RedisServer(self.processes, self.directory, f"redlock{i}")
                        for i in range(1, REDLOCK_NODES + 1)]
        self.etcd = Etcd(self.processes, self.directory)
        self.etcd.start()
        for server in (self.lock_dir, self.template_dir):
            pg("start", server, "-c", PRELOAD)
            with psycopg2.connect(dsn_of(server)) as conn:
                conn.cursor().execute("CREATE EXTENSION IF NOT EXISTS fenced_lock; "
                                      "CREATE SEQUENCE IF NOT EXISTS by_hand_fence CACHE 1")
            conn.close()
        pg("stop", self.template_dir)
        pg("start", self.resource_dir)
        self.lock_dsn, self.resource_dsn = dsn_of(self.lock_dir), dsn_of(self.resource_dir)
        from systems import Resource
        with psycopg2.connect(self.resource_dsn) as conn:
            conn.cursor().execute(Resource.SCHEMA)
        conn.close()

    def crash_lock_server(self):
        """Immediate stop (as a crash: no checkpoint) and start again."""
        pg("crash", self.lock_dir)
        pg("start", self.lock_dir, "-c", PRELOAD)

    def redis_with_sentinels(self, name):
        return RedisWithSentinels(self.processes, self.directory, name)

    def postgres_with_standby(self, name, synchronous):
        return PostgresWithStandby(self.processes, self.directory, name, self.template_dir,
                                   synchronous)

    def etcd_leader(self):
        return EtcdLeader(self.etcd)

    def values(self):
        """What a worker needs to reach the services (passed to it as JSON)."""
        return {"redis": {"unix_socket_path": self.redis.socket},
                "redlock": [{"unix_socket_path": node.socket} for node in self.redlock],
                "etcd_ports": self.etcd.client_ports, "lock_dsn": self.lock_dsn,
                "resource_dsn": self.resource_dsn}

    def stop(self):
        self.processes.stop_all()
        for directory in (self.lock_dir, self.resource_dir):
            pg_stop(directory)


class Proxies:
    """One worker's own way to every lock service, through TCP proxies that the harness can
    blackhole (a partition between that worker and its lock service; the resource stays
    reachable)."""

    def __init__(self, services, name):
        targets = ([services.redis.socket] + [node.socket for node in services.redlock] +
                   [services.etcd.client_ports[0],
                    os.path.join(socket_of(services.lock_dir), ".s.PGSQL.5432")])
        self.proxy = Proxy(services.processes, f"proxy-{name}", targets)

    def values(self):
        ports = self.proxy.ports
        redis_port, redlock_ports, etcd_port, pg_port = ports[0], ports[1:6], ports[6], ports[7]
        return {"redis": {"host": "127.0.0.1", "port": redis_port},
                "redlock": [{"host": "127.0.0.1", "port": port} for port in redlock_ports],
                "etcd_ports": [etcd_port],
                "lock_dsn": f"host=127.0.0.1 port={pg_port} user=postgres dbname=postgres"}
