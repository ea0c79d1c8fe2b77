"""A lease holder in a process of its own, for the fault tests: `holder.py DSN NS ID TTL ROW`
takes the lease and prints "token N"; then, as a careful holder does, checks the lease
before each step of its work; once it finds the lease lost it prints "lost REASON" and tries
its write anyway with its token (row ROW of documents), printing "refused OFFERED ACCEPTED"
or "written"."""

import sys
import time

import psycopg

from fenced_lock import LeaseLost, StaleToken, acquire_lease, fenced_update

dsn, ns, id, ttl, row = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
lease = acquire_lease(dsn, ns, id, ttl)
print("token", lease.token, flush=True)
try:
    while True:
        lease.check()
        time.sleep(0.01)
except LeaseLost as lost:
    print("lost", lost.reason, flush=True)
with psycopg.connect(dsn, autocommit=True) as conn:
    try:
        fenced_update(conn, "documents", row, lease.token, {"body": "paused holder"})
        print("written", flush=True)
    except StaleToken as stale:
        print("refused", stale.offered, stale.accepted, flush=True)
lease.release()
