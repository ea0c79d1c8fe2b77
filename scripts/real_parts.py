"""The real components the HA suite (ha/) and the comparison (compare/) start, all on
127.0.0.1 or Unix sockets and stopped by pid: free TCP ports below the ephemeral range,
processes with their logs, PostgreSQL servers (scripts/pg.sh), etcd 3.4 members, TCP proxies
that can cut or blackhole a link (scripts/tcp_proxy.py), and network namespaces of the run's
own whose packets nftables can drop."""

import json
import os
import re
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


def first_line(argv):
    """The first line a command prints (a version), or "?"."""
    try:
        return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "?"


def commit_measured():
    """The commit a run measures, with " (dirty)" when the tree had changes."""
    def git(*argv):
        return subprocess.run(["git", "-C", os.path.dirname(HERE), *argv],
                              capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return commit + (" (dirty)" if git("status", "--porcelain", "--untracked-files=no")
                     else "")


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


def running(pid):
    """Whether process `pid` exists (a child not yet waited for counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
        if not running(pid):
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


def forget_faketime(since):
    """Removes libfaketime's shared memory and semaphore (/dev/shm, named after the pid of the
    first process it was preloaded into) made since `since` by processes that no longer run.
    The library removes them when that process exits normally, not when a signal ends it (a
    Redis killed with -9), and they would outlive the run."""
    for name in os.listdir("/dev/shm"):
        made_by = re.fullmatch(r"(?:faketime_shm_|sem\.faketime_sem_)(\d+)", name)
        path = os.path.join("/dev/shm", name)
        try:
            if made_by and os.stat(path).st_mtime >= since and not running(int(made_by[1])):
                os.unlink(path)
        except FileNotFoundError:
            pass


def pg(*argv, env=None):
    """scripts/pg.sh with these arguments (start, standby, stop, crash, promote ...); the
    server started in `env` when given (libfaketime's)."""
    subprocess.run([PG, *argv], check=True, stdout=subprocess.DEVNULL, env=env)


def pg_stop(directory):
    """Stops pg.sh's server in `directory` if one runs there; never raises (for clean-ups)."""
    subprocess.run([PG, "stop", directory], stdout=subprocess.DEVNULL)


def socket_of(directory):
    """The socket directory of pg.sh's server in `directory` (libpq's host)."""
    return subprocess.run([PG, "socket", directory], check=True, capture_output=True,
                          text=True).stdout.strip()


def dsn_of(*directories, port=5432, **options):
    """libpq's connection string for pg.sh's servers in `directories` (several: the one that
    `options` such as target_session_attrs pick, as a client of a primary and its standby
    connects); `port`: a server started with a port of its own."""
    hosts = ",".join(socket_of(directory) for directory in directories)
    ports = ",".join(str(port) for _ in directories)
    extra = "".join(f" {name}={value}" for name, value in options.items())
    return f"host={hosts} port={ports} user=postgres dbname=postgres{extra}"


class Processes:
    """Every process this run started, by pid, so that `stop_all` leaves nothing behind."""

    def __init__(self, directory):
        self.directory = directory
        self.created = time.time()
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
        forget_faketime(self.created)


class Etcd:
    """Three etcd 3.4 members on 127.0.0.1, with the v2 API too (Patroni 3.0.2's `etcd:`
    section speaks it; 3.4 serves it only with --enable-v2)."""

    def __init__(self, processes, directory, hosts=()):
        """`hosts`: addresses the members serve clients on besides 127.0.0.1 (a namespace's
        way to the host)."""
        self.processes, self.directory, self.hosts = processes, directory, hosts
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
                "--listen-client-urls",
                ",".join(f"http://{host}:{client}" for host in ("127.0.0.1", *self.hosts)),
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


class Namespaces:
    """Network namespaces of this run's own, each joined to the host by a veth pair (the host
    at .1 of a /30, the namespace at .2), so that a process run in one can be cut off with
    nftables: its packets dropped both ways, nothing acknowledged, no FIN or RST reaching the
    host, as between machines. Only these namespaces and loopback are ever addressed. A
    filesystem socket (a Unix-domain socket) still connects across namespaces."""

    CUT = ("table inet fenced_lock_cut { "
           "chain input { type filter hook input priority 0; policy drop; }; "
           "chain output { type filter hook output priority 0; policy drop; }; }")

    def __init__(self, count):
        self.prefix = f"fenced-lock-{os.getpid()}-"
        Namespaces.remove_stale()
        # A /16 of 10/8 that no address of this machine is in (the second octet from the pid,
        # so that two runs side by side do not meet).
        taken = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True,
                               check=True).stdout
        octet = 20 + os.getpid() % 200
        while f" 10.{octet}." in taken:
            octet = 20 + (octet - 19) % 200
        self.network = f"10.{octet}.0.0/16"
        self.names, self.hosts, self.addresses = [], [], []
        for index in range(count):
            name, veth = f"{self.prefix}{index}", f"flv{os.getpid()}h{index}"
            host, address = f"10.{octet}.{index}.1", f"10.{octet}.{index}.2"
            self.names.append(name)
            for argv in (["ip", "netns", "add", name],
                         ["ip", "link", "add", veth, "type", "veth", "peer", "name", "inner",
                          "netns", name],
                         ["ip", "addr", "add", f"{host}/30", "dev", veth],
                         ["ip", "link", "set", veth, "up"],
                         *(["ip", "netns", "exec", name, *step] for step in (
                             ["ip", "addr", "add", f"{address}/30", "dev", "inner"],
                             ["ip", "link", "set", "inner", "up"],
                             ["ip", "link", "set", "lo", "up"]))):
                subprocess.run(argv, check=True)
            self.hosts.append(host)
            self.addresses.append(address)

    @staticmethod
    def remove_stale():
        """Namespaces left by a run that was killed before it could remove them."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            name = line.split()[0] if line.split() else ""
            parts = name.split("-")
            if name.startswith("fenced-lock-") and len(parts) == 4 and parts[2].isdigit():
                if not os.path.exists(f"/proc/{parts[2]}"):
                    subprocess.run(["ip", "netns", "del", name])

    def command(self, index, argv):
        """`argv` run inside namespace `index`."""
        return ["ip", "netns", "exec", self.names[index], *argv]

    def cut(self, index):
        """Every packet in and out of namespace `index` dropped from now on."""
        subprocess.run(self.command(index, ["nft", "-f", "-"]), input=self.CUT, text=True,
                       check=True)

    def restore(self, index):
        subprocess.run(self.command(index, ["nft", "delete", "table", "inet",
                                            "fenced_lock_cut"]), check=False,
                       stderr=subprocess.DEVNULL)

    def remove(self):
        """Removes every namespace (its end of the veth pair with it, so the host's end goes
        too); never raises (for clean-ups)."""
        for name in self.names:
            subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)
        self.names = []
