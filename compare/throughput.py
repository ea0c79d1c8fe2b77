"""One client of the throughput row: `throughput.py SYSTEM SERVICES_JSON SECONDS random|hot`.
Takes and releases the lock (no work in between) for SECONDS, on random keys or on one hot key,
with the same client code as the trials, and prints how many cycles succeeded and failed (a busy hot key
is tried again at once; a call that fails, e.g. a release that finds the lease row being
written, starts over with a new client). It prints "ready" once its modules are imported and its
client made, and starts when a line arrives on its standard input: the clients of a run start
together, and no client's imports fall into another's window."""

import random
import sys
import time

from systems import SYSTEMS, Endpoints

system_name, endpoints, seconds, keys = sys.argv[1:5]
endpoints = Endpoints(endpoints)
system = SYSTEMS[system_name](endpoints)
print("ready", flush=True)
sys.stdin.readline()
cycles = errors = 0
deadline = time.monotonic() + float(seconds)
while time.monotonic() < deadline:
    try:
        system = system or SYSTEMS[system_name](endpoints)
        grant = system.acquire(random.randint(1, 1_000_000) if keys == "random" else 1)
        if grant is not None:
            system.release(grant)
            cycles += 1
    except Exception:  # noqa: BLE001  (counted, reported; the client starts over)
        errors += 1
        system = None
print(cycles, errors)
