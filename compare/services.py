"""The lock services and the resource, all real, started here under one directory and stopped
by pid: Redis (one for the single-instance lock, five for Redlock) on Unix sockets without
persistence, etcd 3.4 (three members), the PostgreSQL 15 lock server (fenced_lock preloaded)
and the resource's PostgreSQL server, both through scripts/pg.sh."""

import os
import shutil
import signal
import subprocess
import sys

import psycopg2
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from real_parts import Etcd, Processes, Proxy, wait_for  # noqa: E402,F401

PG = os.path.join(ROOT, "scripts/pg.sh")
REDLOCK_NODES = 5


def socket_of(directory):
    return subprocess.run([PG, "socket", directory], check=True, capture_output=True,
                          text=True).stdout.strip()


class RedisServer:
    """Redis 7 as a cache is run: no RDB snapshots, no AOF, so a restart forgets every key."""

    def __init__(self, processes, directory, name):
        self.processes, self.name = processes, name
        self.directory = os.path.join(directory, name)
        self.socket = os.path.join(self.directory, "redis.sock")
        self.process = None
        self.start()

    def start(self):
        shutil.rmtree(self.directory, ignore_errors=True)
        os.makedirs(self.directory)
        self.process = self.processes.spawn(self.name, [
            "redis-server", "--port", "0", "--unixsocket", self.socket, "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", self.directory])
        wait_for(f"{self.name}", lambda: redis.Redis(unix_socket_path=self.socket).ping(), 30)

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def restart(self):
        """kill -9 and start again, empty."""
        self.kill()
        self.start()


class Services:
    def __init__(self, directory):
        self.directory = directory
        self.processes = Processes(directory)
        self.lock_dir = os.path.join(directory, "lock")
        self.resource_dir = os.path.join(directory, "resource")

    def start(self):
        self.redis = RedisServer(self.processes, self.directory, "redis")
        self.redlock = [RedisServer(self.processes, self.directory, f"redlock{i}")
                        for i in range(1, REDLOCK_NODES + 1)]
        self.etcd = Etcd(self.processes, self.directory)
        self.etcd.start()
        subprocess.run([PG, "start", self.lock_dir, "-c", "shared_preload_libraries=fenced_lock"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([PG, "start", self.resource_dir], check=True, stdout=subprocess.DEVNULL)
        self.lock_dsn = f"host={socket_of(self.lock_dir)} user=postgres dbname=postgres"
        self.resource_dsn = f"host={socket_of(self.resource_dir)} user=postgres dbname=postgres"
        with psycopg2.connect(self.lock_dsn) as conn:
            conn.cursor().execute("CREATE EXTENSION IF NOT EXISTS fenced_lock; "
                                  "CREATE SEQUENCE IF NOT EXISTS by_hand_fence CACHE 1")
        from systems import Resource
        with psycopg2.connect(self.resource_dsn) as conn:
            conn.cursor().execute(Resource.SCHEMA)

    def crash_lock_server(self):
        """Immediate stop (as a crash: no checkpoint) and start again."""
        subprocess.run([PG, "crash", self.lock_dir], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([PG, "start", self.lock_dir, "-c", "shared_preload_libraries=fenced_lock"],
                       check=True, stdout=subprocess.DEVNULL)

    def values(self, proxied=None):
        """What a worker needs to reach the services (passed to it as JSON); with `proxied`
        (a Proxies), the lock services through that worker's own proxies."""
        if proxied is not None:
            return proxied.values(self)
        return {"redis": {"unix_socket_path": self.redis.socket},
                "redlock": [{"unix_socket_path": node.socket} for node in self.redlock],
                "etcd_port": self.etcd.client_ports[0], "lock_dsn": self.lock_dsn,
                "resource_dsn": self.resource_dsn}

    def proxies(self, name):
        return Proxies(self, name)

    def stop(self):
        self.processes.stop_all()
        for directory in (self.lock_dir, self.resource_dir):
            subprocess.run([PG, "stop", directory], stdout=subprocess.DEVNULL)


class Proxies:
    """One worker's own way to every lock service, through TCP proxies that the harness can
    blackhole (a partition between that worker and its lock service; the resource stays
    reachable)."""

    def __init__(self, services, name):
        targets = ([services.redis.socket] + [node.socket for node in services.redlock] +
                   [services.etcd.client_ports[0], os.path.join(socket_of(services.lock_dir),
                                                                ".s.PGSQL.5432")])
        self.proxy = Proxy(services.processes, f"proxy-{name}", targets)

    def values(self, services):
        ports = self.proxy.ports
        redis_port, redlock_ports, etcd_port, pg_port = ports[0], ports[1:6], ports[6], ports[7]
        return {"redis": {"host": "127.0.0.1", "port": redis_port},
                "redlock": [{"host": "127.0.0.1", "port": port} for port in redlock_ports],
                "etcd_port": etcd_port,
                "lock_dsn": f"host=127.0.0.1 port={pg_port} user=postgres dbname=postgres",
                "resource_dsn": services.resource_dsn}
