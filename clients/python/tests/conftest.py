"""The test server and PgBouncer that clients/run.sh started, and helpers the tests share."""

import itertools
import os
import subprocess
import sys
import tempfile
import time

import psycopg
import pytest
import real_parts
from fenced_lock import _core

DIRECT = os.environ["CLIENTS_DSN"]
POOLED = os.environ["CLIENTS_POOLED_DSN"]
ROUTES = {"direct": DIRECT, "pooled": POOLED}
HERE = os.path.dirname(os.path.abspath(__file__))

# Keys no other test uses: each test takes fresh ids in namespace 7700.
NS = 7700
_ids = itertools.count(1 + (os.getpid() % 1000) * 1000)


@pytest.fixture
def key():
    """A fresh (ns, id) for one test."""
    return NS, next(_ids)


@pytest.fixture
def doc_id():
    """A row of `documents` no other test writes, with no fence yet."""
    row = next(_ids) % 1000 + 1
    with psycopg.connect(DIRECT, autocommit=True) as conn:
        conn.execute("UPDATE documents SET fence = NULL, body = NULL WHERE id = %s", (row,))
    return row


@pytest.fixture(params=sorted(ROUTES))
def dsn(request):
    """Each test that takes it runs directly and through PgBouncer (transaction mode)."""
    return ROUTES[request.param]


@pytest.fixture
def admin():
    """A direct connection for looking at the server's state."""
    with psycopg.connect(DIRECT, autocommit=True) as conn:
        yield conn


def lease_row(admin, ns, id):
    """The lease's row in fenced_leases (token, owner, expires_at > now()), or None."""
    return admin.execute(
        "SELECT token, owner, expires_at > now() FROM fenced_leases WHERE ns = %s AND id = %s"
        " AND slot = 0", (ns, id)).fetchone()


def wait_until(predicate, timeout, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def restart_server():
    """Stops the test server (fast shutdown: sessions are ended) and starts it again."""
    pg = os.path.join(HERE, "..", "..", "..", "scripts", "pg.sh")
    directory = os.environ["CLIENTS_SERVER_DIR"]
    subprocess.run([pg, "stop", directory], check=True)
    subprocess.run([pg, "start", directory, *os.environ["CLIENTS_SERVER_OPTIONS"].split()],
                   check=True)


def holder_process(*argv):
    """tests/holder.py in a process of its own, its output line by line."""
    return subprocess.Popen([sys.executable, os.path.join(HERE, "holder.py"), *map(str, argv)],
                            stdout=subprocess.PIPE, text=True, bufsize=1)


@pytest.fixture
def proxy():
    """A TCP proxy on 127.0.0.1 in front of the test server's socket, and a DSN through it."""
    directory = tempfile.mkdtemp(prefix="proxy-", dir=os.environ["CLIENTS_WORK"])
    processes = real_parts.Processes(directory)
    socket = os.path.join(os.environ["CLIENTS_DSN"].split()[0].split("=")[1], ".s.PGSQL.5432")
    link = real_parts.Proxy(processes, "server", [socket])
    dbname = os.environ["CLIENTS_DSN"].split("dbname=")[1]
    link.dsn = f"host=127.0.0.1 port={link.ports[0]} user=postgres dbname={dbname}"
    yield link
    processes.stop_all()


def assert_told_of_link_fault(fault, reasons, told_after, ttl, lease_token, admin, key):
    """What a holder must be told of a link fault, and what the server must still show: a cut
    is a lost connection, told at once (within a third of the ttl and a second); a blackhole
    is told at the lease's deadline. Either way the server has the lease under its one token
    until it expires (nobody renewed it under another)."""
    if fault == "cut":
        assert "connection" in reasons[0], reasons
        assert told_after < ttl / 3 + 1
    else:
        assert reasons == [_core.LOST_DEADLINE]
    row = lease_row(admin, *key)
    assert row is None or row[0] == lease_token
