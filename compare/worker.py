"""One worker of a comparison trial, a process of its own (so that it can be paused and
killed): `worker.py SYSTEM NAME ENDPOINTS_JSON ROW_BASE WORK_MS LOG KEY [KEY ...]`.

In a loop: take the lock on one of the hot keys, read the counter from the resource, work for
WORK_MS, write the value + 1 back with whatever token the system gave, release. Lines in LOG:
    G name key token monotonic_ns      granted
    W name key token accepted|refused monotonic_ns
    E name monotonic_ns error          the lock service failed this cycle"""

import random
import signal
import sys
import time

import psycopg2
import redis
from etcd3gw.exceptions import Etcd3Exception
from pottery import PotteryError

from systems import SYSTEMS, Endpoints, Resource

system_name, name, endpoints, row_base, work_ms, log_path = sys.argv[1:7]
keys = [int(key) for key in sys.argv[7:]]
row_base, work_ms = int(row_base), int(work_ms)
running = True


def stop(*_):
    global running
    running = False


signal.signal(signal.SIGTERM, stop)
services = Endpoints(endpoints)
out = open(log_path, "a", buffering=1)
resource = Resource(services.resource_dsn)
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
        out.write(f"G {name} {key} {grant.token} {granted_ns}\n")
        value = resource.read(system.check, row_base + key, grant.token)
        time.sleep(work_ms / 1000)
        accepted = resource.write(system.check, row_base + key, name, grant.token, value,
                                  granted_ns, time.monotonic_ns())
        out.write(f"W {name} {key} {grant.token} {'accepted' if accepted else 'refused'} "
                  f"{time.monotonic_ns()}\n")
        try:
            system.release(grant)
        except Exception as error:  # noqa: BLE001  (the lock had expired: pottery raises)
            out.write(f"E {name} {time.monotonic_ns()} release:{type(error).__name__}\n")
    except (psycopg2.OperationalError, psycopg2.InterfaceError, redis.RedisError,
            Etcd3Exception, PotteryError, ConnectionError) as error:
        # The lock service went away: whatever this worker held is gone with its client.
        out.write(f"E {name} {time.monotonic_ns()} {type(error).__name__}\n")
        system = None
        time.sleep(0.05)
out.close()
