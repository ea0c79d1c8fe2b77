"""The mixed workload, as every driver of the suite runs it through PgBouncer (run.sh starts
two processes of it per driver and settings at once, and says what each transaction checks).

A process opens 6 connections and runs 150 transactions, each on a connection and of a kind
picked at random (seeded by the process number), on keys no other transaction uses, and checks
each answer against what was asked. It prints one line:
"<driver> mixed <settings> p<N>: <n> transactions, <w> wrong, <e> errors[; first: ...]".
"""

import json
import os
import random

NAMESPACE = 4205
CONNECTIONS = 6
TRANSACTIONS = 150
HELD = "SELECT token FROM fenced_locks WHERE ns = $1 AND id = $2 AND pid = pg_backend_pid()"


def run(driver, settings, process, connect):
    slot = int(os.environ["MIXED_SLOT"])
    conns = [connect() for _ in range(CONNECTIONS)]
    picks = random.Random(process)
    wrong, errors, first = 0, 0, None
    for i in range(TRANSACTIONS):
        conn = picks.choice(conns)
        kind = picks.choice(["acquire", "try", "current", "leader", "update"])
        key = slot * 10000 + process * 1000 + i
        try:
            problem = transaction(conn, kind, key, slot * 20 + process * 10 + i % 10 + 3001)
            if problem:
                wrong += 1
        except conn.errors as error:
            errors += 1
            problem = f"SQLSTATE {conn.sqlstate(error)}: {str(error).splitlines()[0]}"
            try:
                conn.one("ROLLBACK")
            except conn.errors:
                pass
        if problem and first is None:
            first = f"{kind}: {problem}"
    for conn in conns:
        conn.close()
    print(f"{driver} mixed {settings} p{process}: {TRANSACTIONS} transactions, {wrong} wrong,"
          f" {errors} errors" + (f"; first: {first}" if first else ""))
    return wrong == 0 and errors == 0


def transaction(conn, kind, key, row):
    """One transaction of the given kind; returns what was wrong with its answers, or None."""
    conn.one("BEGIN")
    if kind in ("acquire", "try"):
        function = "acquire_fenced" if kind == "acquire" else "try_acquire_fenced"
        token = conn.one(f"SELECT {function}($1, $2)", NAMESPACE, key)
        held = conn.one(HELD, NAMESPACE, key)
        problem = None if isinstance(token, int) and token > 0 and held == token else \
            f"{function} gave {token!r}, fenced_locks shows {held!r} on this connection"
    elif kind == "current":
        fence = conn.one("SELECT current_fence($1, $2)", NAMESPACE, key)
        problem = None if fence is None else f"current_fence of a free key gave {fence!r}"
    elif kind == "leader":
        owner = f"owner-{key}"
        term = conn.one("SELECT try_acquire_fenced_session($1, $2, $3)", NAMESPACE, key, owner)
        released = conn.one("SELECT release_fenced($1, $2, $3)", NAMESPACE, key, owner)
        problem = None if isinstance(term, int) and term > 0 and released is True else \
            f"try_acquire_fenced_session gave {term!r}, release_fenced {released!r}"
    else:
        token = conn.one("SELECT acquire_fenced($1, $2)", NAMESPACE, key)
        written = conn.one("SELECT fenced_update_or_false($1, $2, $3, $4)", "driver_rows",
                           conn.row_id(row), token, json.dumps({"v": str(key)}))
        problem = None if written is True else \
            f"fenced_update with token {token!r} gave {written!r}"
    conn.one("COMMIT")
    return problem
