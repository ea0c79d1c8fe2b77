#!/usr/bin/env python3
"""Listens on 127.0.0.1 at every port of a range until killed, as another program on the
machine might: `make test` runs its suites meanwhile, which proves that no test server needs a
TCP port (0.1.0's servers used 54315-54341, inside the ephemeral range, and failed when an
outgoing connection held one). Ports already taken are skipped: they are taken anyway."""
import signal
import socket
import sys

first, last = int(sys.argv[1]), int(sys.argv[2])
held = []
for port in range(first, last + 1):
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        held.append(listener)
    except OSError:
        listener.close()
print(f"holding {len(held)} of ports {first}-{last} on 127.0.0.1", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.pause()
