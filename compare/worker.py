"""One worker of a comparison trial, a process of its own (so that it can be paused and
killed): `worker.py SYSTEM NAME ENDPOINTS_JSON ROW_BASE WORK_MS LOG KEY [KEY ...]`.

In a loop: take the lock on one of the keys, read the counter from the resource, work for
WORK_MS, write the value + 1 back with whatever token the system gave, release. Where the
system's lock is a lease, a watchdog thread renews it every third of the TTL while the work
goes on, as lock clients do (Redisson's watchdog, etcd's keep-alive); a failed renewal does not
stop the work, since no check before the write can close the window (a pause can fall between
the check and the write). ROW_BASE `none`: the rest of an application, taking other keys
without work and without touching the resource. Lines in LOG:
    G name key token monotonic_ns      granted
    R name key held|lost|error         a renewal
    W name key token accepted|refused monotonic_ns
    E name monotonic_ns error          the lock service failed this cycle"""

import random
import signal
import sys
import threading
import time

import psycopg2
import redis
from etcd3gw.exceptions import Etcd3Exception
from pottery import PotteryError

from systems import SYSTEMS, TTL_MS, Endpoints, Resource

system_name, name, endpoints, row_base, work_ms, log_path = sys.argv[1:7]
keys = [int(key) for key in sys.argv[7:]]
work_ms = int(work_ms)
running = True


def stop(*_):
    global running
    running = False


signal.signal(signal.SIGTERM, stop)
services = Endpoints(endpoints)
out = open(log_path, "a", buffering=1)
log_guard = threading.Lock()


def log(line):
    with log_guard:
        out.write(line + "\n")


class Watchdog(threading.Thread):
    """Renews `grant` every third of the TTL until stopped."""

    def __init__(self, system, grant):
        super().__init__(daemon=True)
        self.system, self.grant = system, grant
        self.stopped = threading.Event()
        self.start()

    def run(self):
        while not self.stopped.wait(TTL_MS / 3000):
            try:
                held = "held" if self.system.renew(self.grant) else "lost"
            except Exception as error:  # noqa: BLE001  (logged; the work goes on regardless)
                held = f"error:{type(error).__name__}"
            log(f"R {name} {self.grant.key} {held}")

    def finish(self):
        """Stops renewing; False when a renewal is still stuck on the lock service (its client
        must then not be used again)."""
        self.stopped.set()
        self.join(timeout=1)
        return not self.is_alive()


def lost_service(error):
    """Whether `error` says the lock service went away. psycopg2 raises DatabaseError, not
    OperationalError, for a server that closed the connection, and its `closed` can still be 0
    then (workers died of it at a crashed primary): such an error counts when it has no
    SQLSTATE (libpq's own, not the server's), so that any SQL error stays loud."""
    if isinstance(error, psycopg2.DatabaseError) and not isinstance(error,
                                                                    psycopg2.OperationalError):
        return error.pgcode is None
    return True


resource = None if row_base == "none" else Resource(services.resource_dsn)
system = None
while running:
    try:
        if system is None:
            system = SYSTEMS[system_name](services)
        key = random.choice(keys)
        grant = system.acquire(key)
        if grant is None:
            time.sleep(0.005)
            continue
        granted_ns = time.monotonic_ns()
        log(f"G {name} {key} {grant.token} {granted_ns}")
        if resource is None:
            system.release(grant)
            time.sleep(0.005)
            continue
        watchdog = Watchdog(system, grant) if hasattr(system, "renew") else None
        try:
            value = resource.read(system.check, int(row_base) + key, grant.token)
            time.sleep(work_ms / 1000)
            accepted = resource.write(system.check, int(row_base) + key, name, grant.token,
                                      value, granted_ns, time.monotonic_ns())
            log(f"W {name} {key} {grant.token} {'accepted' if accepted else 'refused'} "
                f"{time.monotonic_ns()}")
        finally:
            stuck = watchdog is not None and not watchdog.finish()
        if stuck:
            raise ConnectionError("a renewal is stuck on the lock service")
        try:
            system.release(grant)
        except Exception as error:  # noqa: BLE001  (the lock had expired: pottery raises)
            log(f"E {name} {time.monotonic_ns()} release:{type(error).__name__}")
    except (psycopg2.DatabaseError, psycopg2.InterfaceError, redis.RedisError,
            Etcd3Exception, PotteryError, ConnectionError) as error:
        if not lost_service(error):
            raise
        # The lock service went away: whatever this worker held is gone with its client.
        log(f"E {name} {time.monotonic_ns()} {type(error).__name__}")
        system = None
        time.sleep(0.05)
out.close()
