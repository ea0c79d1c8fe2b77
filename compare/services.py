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
from counters import create_schema  # noqa: E402
from real_parts import (Etcd, Namespaces, Processes, Proxy, dsn_of, free_ports,  # noqa: E402
                        pg, pg_stop, socket_of, stop_pid, wait_for)

REDLOCK_NODES = 5
# Workers that a trial can run in network namespaces of their own, one each.
NAMESPACED_WORKERS = 3
# The lock server's TCP settings as the README advises for session and transaction locks
# (a dead client's connection found within seconds), scaled down as the TTLs are: an idle
# connection is probed after 1 s, every 1 s, dropped after 2 unanswered probes; data left
# unacknowledged for 2 s drops it too.
ADVISED_TCP = {"tcp_keepalives_idle": 1, "tcp_keepalives_interval": 1,
               "tcp_keepalives_count": 2, "tcp_user_timeout": 2000}
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
    """Redis 7 as a cache is run: no RDB snapshots, no AOF, so a restart forgets every key (or
    `persistent`, with AOF). On
    a Unix socket, and on `port` of 127.0.0.1 (and of `hosts`) when given (Sentinel speaks TCP
    only; a worker in a namespace reaches the host by its address)."""

    def __init__(self, processes, directory, name, port=0, options=(), hosts=(),
                 persistent=False):
        """`persistent`: with AOF (`appendfsync everysec`), kept across restarts."""
        self.processes, self.name, self.port, self.options = processes, name, port, options
        self.hosts, self.persistent = hosts, persistent
        self.directory = os.path.join(directory, name)
        self.socket = os.path.join(self.directory, "redis.sock")
        self.process = None
        self.start()

    def start(self, clock=None, keep_data=False):
        """Started empty (on its own data with `keep_data`); through libfaketime on `clock`
        when given."""
        if not keep_data:
            shutil.rmtree(self.directory, ignore_errors=True)
        os.makedirs(self.directory, exist_ok=True)
        persistence = (["--appendonly", "yes", "--appendfsync", "everysec"] if self.persistent
                       else ["--appendonly", "no"])
        self.process = self.processes.spawn(self.name, [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", *self.hosts,
            # Protected mode refuses every address but loopback without a password; the
            # namespaces' addresses are the run's own.
            *(["--protected-mode", "no"] if self.hosts else []),
            "--unixsocket", self.socket, "--unixsocketperm", "700", "--save", "",
            *persistence, "--dir", self.directory, *self.options],
            env=clock.environment() if clock else None)
        wait_for(f"{self.name}", self.client().ping, 30)

    def client(self):
        return redis.Redis(unix_socket_path=self.socket)

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def restart(self, clock=None, keep_data=False):
        """kill -9 and start again, empty (on its data with `keep_data`)."""
        self.kill()
        self.start(clock, keep_data)


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

    def __init__(self, processes, directory, name, template, synchronous, settings=()):
        """`settings`: more `-c` options for both servers (a control's)."""
        self.primary_dir = os.path.join(directory, f"{name}-primary")
        self.standby_dir = os.path.join(directory, f"{name}-standby")
        for server in (self.primary_dir, self.standby_dir):
            shutil.rmtree(server, ignore_errors=True)
        os.makedirs(self.primary_dir)
        subprocess.run(["cp", "-a", os.path.join(template, "data"), self.primary_dir],
                       check=True)
        options = ["-c", PRELOAD]
        for setting in settings:
            options += ["-c", setting]
        pg("start", self.primary_dir, *options,
           "-c", f"synchronous_standby_names={'*' if synchronous else ''}")
        self.link = Proxy(processes, f"{name}-replication",
                          [os.path.join(socket_of(self.primary_dir), ".s.PGSQL.5432")])
        pg("standby", self.standby_dir, self.primary_dir, *options, "-c",
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


class PostgresOnClock:
    """A PostgreSQL 15 lock server (a copy of the template) started through libfaketime on a
    clock of its own, for the lease's clock jump."""

    def __init__(self, directory, name, template, clock):
        self.dir = os.path.join(directory, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        subprocess.run(["cp", "-a", os.path.join(template, "data"), self.dir], check=True)
        pg("start", self.dir, "-c", PRELOAD, env=clock.environment())

    def values(self):
        return {"lock_dsn": dsn_of(self.dir)}

    def stop(self):
        pg_stop(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)


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
        self.namespaces = None

    def start(self):
        self.namespaces = Namespaces(NAMESPACED_WORKERS)
        hosts = self.namespaces.hosts
        redis_port, *redlock_ports = free_ports(1 + REDLOCK_NODES)
        self.redis = RedisServer(self.processes, self.directory, "redis", redis_port,
                                 hosts=hosts)
        self.redis_aof = RedisServer(self.processes, self.directory, "redis-aof",
                                     persistent=True)
        self.redlock = [RedisServer(self.processes, self.directory, f"redlock{i}", port,
                                    hosts=hosts)
                        for i, port in enumerate(redlock_ports, 1)]
        self.etcd = Etcd(self.processes, self.directory, hosts)
        self.etcd.start()
        # The lock server also on the namespaces' way to the host, on a port of its own.
        self.lock_port, = free_ports(1)
        self.lock_options = ["-c", PRELOAD, "-c", f"port={self.lock_port}",
                             "-c", "listen_addresses=" + ",".join(hosts)]
        for name, value in ADVISED_TCP.items():
            self.lock_options += ["-c", f"{name}={value}"]
        for server, options in ((self.lock_dir, self.lock_options),
                                (self.template_dir, ["-c", PRELOAD])):
            pg("start", server, *options)
            dsn = dsn_of(server, port=self.lock_port if server == self.lock_dir else 5432)
            with psycopg2.connect(dsn) as conn:
                conn.cursor().execute("CREATE EXTENSION IF NOT EXISTS fenced_lock; "
                                      "CREATE SEQUENCE IF NOT EXISTS by_hand_fence CACHE 1")
            conn.close()
        with open(os.path.join(self.lock_dir, "data", "pg_hba.conf"), "a") as hba:
            hba.write(f"host all postgres {self.namespaces.network} trust\n")
        pg("stop", self.template_dir)
        pg("start", self.resource_dir)
        self.lock_dsn = dsn_of(self.lock_dir, port=self.lock_port)
        self.resource_dsn = dsn_of(self.resource_dir)
        with psycopg2.connect(self.lock_dsn) as conn:
            conn.cursor().execute("SELECT pg_reload_conf()")
        conn.close()
        create_schema(self.resource_dsn)

    def crash_lock_server(self):
        """Immediate stop (as a crash: no checkpoint) and start again."""
        pg("crash", self.lock_dir)
        pg("start", self.lock_dir, *self.lock_options)

    def end_sessions(self, application_name):
        """The lock server's sessions of a client that is gone (a lost host's), ended as an
        operator would; how many there were."""
        with psycopg2.connect(self.lock_dsn) as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE application_name = %s", (application_name,))
            ended = cursor.fetchone()[0]
        conn.close()
        return ended

    def redis_with_sentinels(self, name):
        return RedisWithSentinels(self.processes, self.directory, name)

    def postgres_with_standby(self, name, synchronous, settings=()):
        return PostgresWithStandby(self.processes, self.directory, name, self.template_dir,
                                   synchronous, settings)

    def postgres_on_clock(self, name, clock):
        return PostgresOnClock(self.directory, name, self.template_dir, clock)

    def etcd_leader(self):
        return EtcdLeader(self.etcd)

    def values(self):
        """What a worker needs to reach the services (passed to it as JSON)."""
        return {"redis": {"unix_socket_path": self.redis.socket},
                "redis_aof": {"unix_socket_path": self.redis_aof.socket},
                "redlock": [{"unix_socket_path": node.socket} for node in self.redlock],
                "etcd_host": "127.0.0.1", "etcd_ports": self.etcd.client_ports,
                "lock_dsn": self.lock_dsn, "resource_dsn": self.resource_dsn}

    def values_in_namespace(self, index):
        """What a worker in namespace `index` reaches the lock services by: TCP to the host's
        end of its veth pair (the resource stays on its Unix socket, which no cut affects)."""
        host = self.namespaces.hosts[index]
        return {"redis": {"host": host, "port": self.redis.port},
                "redlock": [{"host": host, "port": node.port} for node in self.redlock],
                "etcd_host": host, "etcd_ports": self.etcd.client_ports,
                "lock_dsn": f"host={host} port={self.lock_port} user=postgres dbname=postgres"}

    def stop(self):
        self.processes.stop_all()
        for directory in (self.lock_dir, self.resource_dir):
            pg_stop(directory)
        if self.namespaces is not None:
            self.namespaces.remove()
