"""The real components the HA suite (ha/) and the comparison (compare/) start, all on
127.0.0.1 or Unix sockets and stopped by pid: free TCP ports below the ephemeral range,
processes with their logs, PostgreSQL servers (scripts/pg.sh), etcd 3.4 members, TCP proxies
that can cut or blackhole a link (scripts/tcp_proxy.py)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PG = os.path.join(HERE, "pg.sh")


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


_given_ports = set()


def free_ports(count, first=21000, last=32000):
    """Ports below the ephemeral range (32768-60999: an outgoing connection may hold any of
    those) that nothing listens on now and that this run has not given out yet, starting at a
    point that depends on this process so that two runs side by side do not race for them."""
    ports = []
    port = first + (os.getpid() * 7) % (last - first)
    while len(ports) < count:
        if port in _given_ports:
            port = first if port >= last else port + 1
            continue
        probe = socket.socket()
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            ports.append(port)
            _given_ports.add(port)
        except OSError:
            pass
        finally:
            probe.close()
        port = first if port >= last else port + 1
    return ports


def wait_for(what, predicate, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception:  # not up yet: connection refused, HTTP error, partial state
            pass
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def stop_pid(pid, sig=signal.SIGTERM, timeout=20):
    """Sends `sig` to `pid` (and SIGCONT, should it be stopped), then SIGKILL after
    `timeout` s."""
    try:
        os.kill(pid, sig)
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def pg(*argv):
    """scripts/pg.sh with these arguments (start, standby, stop, crash, promote ...)."""
    subprocess.run([PG, *argv], check=True, stdout=subprocess.DEVNULL)


def pg_stop(directory):
    """Stops pg.sh's server in `directory` if one runs there; never raises (for clean-ups)."""
    subprocess.run([PG, "stop", directory], stdout=subprocess.DEVNULL)


def socket_of(directory):
    """The socket directory of pg.sh's server in `directory` (libpq's host)."""
    return subprocess.run([PG, "socket", directory], check=True, capture_output=True,
                          text=True).stdout.strip()


def dsn_of(*directories, **options):
    """libpq's connection string for pg.sh's servers in `directories` (several: the one that
    `options` such as target_session_attrs pick, as a client of a primary and its standby
    connects)."""
    hosts = ",".join(socket_of(directory) for directory in directories)
    ports = ",".join("5432" for _ in directories)
    extra = "".join(f" {name}={value}" for name, value in options.items())
    return f"host={hosts} port={ports} user=postgres dbname=postgres{extra}"


class Processes:
    """Every process this run started, by pid, so that `stop_all` leaves nothing behind."""

    def __init__(self, directory):
        self.directory = directory
        self.started = []
        # Stopped first, in reverse: what must shut down in order (Patroni before its server).
        self.cleanups = []

    def spawn(self, name, argv, **kwargs):
        out = open(os.path.join(self.directory, f"{name}.log"), "ab")
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, **kwargs)
        self.started.append(process)
        return process

    def stop_all(self):
        for cleanup in reversed(self.cleanups):
            cleanup()
        for process in reversed(self.started):
            if process.poll() is None:
                stop_pid(process.pid)
            try:
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass


class Etcd:
    """Three etcd 3.4 members on 127.0.0.1, with the v2 API too (Patroni 3.0.2's `etcd:`
    section speaks it; 3.4 serves it only with --enable-v2)."""

    def __init__(self, processes, directory):
        self.processes, self.directory = processes, directory
        ports = free_ports(6)
        self.client_ports, self.peer_ports = ports[:3], ports[3:]
        self.members, self.argvs = [], []

    def start(self):
        cluster = ",".join(
            f"e{i}=http://127.0.0.1:{port}" for i, port in enumerate(self.peer_ports, 1))
        for i, (client, peer) in enumerate(zip(self.client_ports, self.peer_ports), 1):
            data = os.path.join(self.directory, f"etcd{i}")
            shutil.rmtree(data, ignore_errors=True)
            self.argvs.append([
                "etcd", "--name", f"e{i}", "--data-dir", data, "--enable-v2=true",
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", f"fenced-lock-{os.getpid()}",
                "--heartbeat-interval", "100", "--election-timeout", "1000",
            ])
            self.members.append(self.processes.spawn(f"etcd{i}", self.argvs[-1]))
        for port in self.client_ports:
            self.wait_healthy(port)
        log(f"etcd: 3 members healthy on ports {self.client_ports}")

    def wait_healthy(self, port):
        wait_for(f"etcd on port {port}", lambda: json.load(urllib.request.urlopen(
            f"http://127.0.0.1:{port}/health", timeout=1))["health"] == "true", 30)

    def restart(self, index):
        """kill -9 of member `index`, then the same member started again on its data."""
        self.members[index].send_signal(signal.SIGKILL)
        self.members[index].wait()
        self.members[index] = self.processes.spawn(f"etcd{index + 1}", self.argvs[index])
        self.wait_healthy(self.client_ports[index])


class Proxy:
    """A TCP proxy on 127.0.0.1 (scripts/tcp_proxy.py) in front of `targets` (ports, or paths
    of Unix sockets), one listening port each, that can be cut (every connection reset, new
    ones refused) or blackholed (connections kept, no byte passes)."""

    def __init__(self, processes, name, targets):
        self.ports = free_ports(len(targets))
        argv = [sys.executable, os.path.join(HERE, "tcp_proxy.py")]
        for port, target in zip(self.ports, targets):
            argv += [str(port), str(target)]
        self.process = processes.spawn(f"proxy-{name}", argv)
        for port in self.ports:
            wait_for(f"proxy port {port}", lambda port=port: socket.create_connection(
                ("127.0.0.1", port), timeout=1).close() or True, 10)

    def cut(self):
        os.kill(self.process.pid, signal.SIGUSR1)

    def blackhole(self):
        os.kill(self.process.pid, signal.SIGHUP)

    def restore(self):
        os.kill(self.process.pid, signal.SIGUSR2)

    def stop(self):
        stop_pid(self.process.pid, timeout=5)
        self.process.wait()
