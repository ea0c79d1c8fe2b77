"""One worker of a comparison trial, a process of its own (so that it can be paused and
killed): `worker.py SYSTEM NAME ENDPOINTS_JSON ROW_BASE WORK_MS LOG KEY [KEY ...]`.

In a loop: take the lock on one of the keys, read the counter from the resource, work for
WORK_MS, write the value + 1 back with whatever token the system gave, release. Where the
system's lock is a lease, a watchdog thread renews it every third of the TTL while the work
goes on, as lock clients do (Redisson's watchdog, etcd's keep-alive); a failed renewal does not
stop the work, since no check before the write can close the window (a pause can fall between
the check and the write), except for a careful client, which gives its write up when a renewal
found the lock lost or its validity ran out. ROW_BASE `none`: the rest of an application, taking other keys
without work and without touching the resource. Lines in LOG:
    G name key token monotonic_ns      granted
    R name key held|lost|error:CLASS   a renewal
    W name key token accepted|refused monotonic_ns
    A name key monotonic_ns            a careful client gave its write up (lock lost)
    E name monotonic_ns f CLASS        an error ended this cycle (CLASS `lost`: the lock
                                       service went away; else the error's code)
and, beside LOG (LOG's name with .history), its history for the checker (checker/README.md):
an invoke and an ok / fail / info line per acquire, renew, release, read and write."""

import random
import signal
import sys
import threading
import time

import psycopg2
import redis
from etcd3gw.exceptions import Etcd3Exception
from pottery import PotteryError
from pottery.exceptions import PrimitiveError

from counters import Counters
from histories import History, history_of
from systems import SYSTEMS, TTL_MS, Endpoints, error_class, validity_s

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


history = History(history_of(log_path), name)


def token_of(grant):
    """A grant's token as the history has it: an integer, or None for a lock without one."""
    return grant.token if isinstance(grant.token, int) else None


def server_time(system):
    """The lock server's clock at the system's last call, where a lease on it is involved (a
    history's `server_time`), as keyword arguments."""
    time_us = getattr(system, "server_time", None)
    return {} if time_us is None else {"server_time": time_us}


class Watchdog(threading.Thread):
    """Renews `grant` every third of the TTL until stopped."""

    def __init__(self, system, grant):
        super().__init__(daemon=True)
        self.system, self.grant = system, grant
        self.stopped = threading.Event()
        self.start()

    def run(self):
        while not self.stopped.wait(TTL_MS / 3000):
            renewal = history.invoke("renew", self.grant.key, watchdog=True,
                                     token=token_of(self.grant))
            asked_at = time.monotonic()
            try:
                held = "held" if self.system.renew(self.grant) else "lost"
                history.end(renewal, "ok" if held == "held" else "fail",
                            **server_time(self.system))
                if held == "held":
                    self.grant.valid_until = asked_at + validity_s()
                else:
                    self.grant.lost = True
            except Exception as error:  # noqa: BLE001  (logged; the work goes on regardless)
                code = error_class(error)
                held = f"error:{code}"
                history.end(renewal, "info" if code == "lost" else "fail",
                            error=type(error).__name__, code=code)
            log(f"R {name} {self.grant.key} {held}")

    def finish(self):
        """Stops renewing; False when a renewal is still stuck on the lock service (its client
        must then not be used again)."""
        self.stopped.set()
        self.join(timeout=1)
        return not self.is_alive()


resource = None
system = None
doing = "connect"
while running:
    try:
        if system is None:
            doing = "connect"
            system = SYSTEMS[system_name](services)
        if resource is None and row_base != "none":
            resource = Counters(services.resource_dsn)
        key = random.choice(keys)
        doing = "acquire"
        acquiring = history.invoke("acquire", key)
        grant = system.acquire(key)
        if grant is None:
            history.end(acquiring, "fail")
            time.sleep(0.005)
            continue
        history.end(acquiring, "ok", token=token_of(grant), **server_time(system))
        granted_ns = time.monotonic_ns()
        log(f"G {name} {key} {grant.token} {granted_ns}")
        if row_base == "none":
            doing = "release"
            releasing = history.invoke("release", key, token=token_of(grant))
            system.release(grant)
            history.end(releasing, "ok")
            time.sleep(0.005)
            continue
        watchdog = Watchdog(system, grant) if hasattr(system, "renew") else None
        try:
            doing = "read"
            reading = history.invoke("read", key, token=token_of(grant))
            value = resource.read(system.check, int(row_base) + key, grant.token)
            # A claim refused: a newer holder has been here, nothing was read.
            history.end(reading, "fail" if value is None else "ok", value=value)
            time.sleep(work_ms / 1000)
            if system.careful and (grant.lost or time.monotonic() > grant.valid_until):
                # The careful client's check: the lock may no longer be its own, so no write.
                log(f"A {name} {key} {time.monotonic_ns()}")
            else:
                doing = "write"
                writing = history.invoke("write", key, token=token_of(grant), grant=granted_ns,
                                         value=None if value is None else value + 1)
                accepted = resource.write(system.check, int(row_base) + key, name,
                                          grant.token, value, granted_ns, time.monotonic_ns())
                history.end(writing, "ok", accepted=accepted)
                log(f"W {name} {key} {grant.token} {'accepted' if accepted else 'refused'} "
                    f"{time.monotonic_ns()}")
        finally:
            stuck = watchdog is not None and not watchdog.finish()
        if stuck:
            raise ConnectionError("a renewal is stuck on the lock service")
        doing = "release"
        releasing = history.invoke("release", key, token=token_of(grant))
        system.release(grant)
        history.end(releasing, "ok")
    except (psycopg2.Error, redis.RedisError, Etcd3Exception, PotteryError, PrimitiveError,
            ConnectionError) as error:
        # Counted, never swallowed: the lock service went away (`lost`: whatever this worker
        # held is gone with its client), or a server refused the call with an error of its
        # own (its code). Either ends the cycle; the worker starts over with new clients.
        code = error_class(error)
        history.abandon(error, code, code == "lost")
        log(f"E {name} {time.monotonic_ns()} {doing} {code}")
        system = resource = None
        time.sleep(0.05)
out.close()
