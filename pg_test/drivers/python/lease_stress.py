"""Leases through PgBouncer in transaction mode: 4 clients x 200 lease cycles on 3 keys, with
psycopg. Every seventh cycle a client "dies" holding its lease (no release), so the next owner
takes over after the TTL. Logical decoding (a test_decoding slot, created here) records every
committed change of the lease table, with its transaction's commit time; the check reads that
history (a trigger cannot: the lease functions write the table directly and refuse one):

- at no instant do two owners hold one key: each holding starts after the previous one ended
  (its release, or its expiry as last renewed);
- tokens are unique, and rise per key in the order holdings began;
- every fenced write was made by the owner of a holding, with that holding's token.

    python lease_stress.py     (connection details from the environment, as patterns.py)

Prints "psycopg pooled lease_stress: ok" or "... FAILED: why".
"""

import datetime
import os
import random
import re
import sys
import threading
import time

import psycopg

DIRECT = dict(host=os.environ["DRIVERS_HOST"], port=int(os.environ["DRIVERS_PORT"]),
              dbname=os.environ["DRIVERS_DATABASE"], user="postgres", autocommit=True)
POOLED = dict(DIRECT, host=os.environ["DRIVERS_POOLED_HOST"],
              port=int(os.environ["DRIVERS_POOLED_PORT"]), prepare_threshold=None)
NS, KEYS, CLIENTS, CYCLES = 4204, 3, 4, 200
TTL = datetime.timedelta(milliseconds=150)

SLOT = "lease_stress_history"

with psycopg.connect(**DIRECT) as setup:
    setup.execute("CREATE TABLE lease_writes (id int, owner text, token bigint)")
    setup.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (SLOT,))

errors = []
lost = []  # (key, token) whose release found the lease gone: expired, then taken over


def call(conn, sql, params):
    """One lease call; 55P03 (its row locked by a concurrent call, README: retry) is retried."""
    while True:
        try:
            return conn.execute(sql, params).fetchone()[0]
        except psycopg.errors.LockNotAvailable:
            time.sleep(0.001)


def client(number):
    try:
        cycles(number)
    except Exception as error:  # noqa: BLE001 - a client that died fails the run
        errors.append(f"client {number}: {error!r}")


def cycles(number):
    owner = f"client-{number}"
    rng = random.Random(number)
    with psycopg.connect(**POOLED) as conn:
        for cycle in range(CYCLES):
            key = rng.randrange(KEYS)
            try:
                token = conn.execute("SELECT acquire_lease(%s, %s, %s, %s, %s)",
                                     (NS, key, owner, TTL, datetime.timedelta(seconds=2))
                                     ).fetchone()[0]
            except psycopg.errors.LockNotAvailable:
                continue  # still held after the wait (55P03)
            # "Work" under the lease, fenced: a write that records the token it carried, in
            # one statement that also checks the lease is still this token's.
            conn.execute("""INSERT INTO lease_writes
                            SELECT %s, %s, %s FROM fenced_lease_state
                             WHERE ns = %s AND id = %s AND token = %s AND owner = %s""",
                         (key, owner, token, NS, key, token, owner))
            if call(conn, "SELECT renew_lease(%s, %s, %s, %s)", (NS, key, token, TTL)) is None:
                continue
            if cycle % 7 == 6:
                continue  # dies holding the lease: the next owner waits for the TTL
            if not call(conn, "SELECT release_lease(%s, %s, %s)", (NS, key, token)):
                lost.append((key, token))


threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()


def timestamp(text):
    """A timestamptz as test_decoding prints it ('2026-12-02 18:35:00.123456+00')."""
    if re.search(r"[+-]\d\d$", text):
        text += ":00"
    return datetime.datetime.fromisoformat(text)


def lease_history(changes):
    """(id, owner, token, acquired_at, expires_at, changed_at) of every insert, update and
    delete of namespace NS's leases, in commit order; changed_at is the change's commit time.
    A delete is a release (0.4.0's release deletes the row; test_decoding shows its key only):
    owner None, as a release before it wrote."""
    history, pending = [], []
    field = re.compile(r"(\w+)\[[^\]]*\]:('(?:[^']|'')*'|\S+)")
    for (line,) in changes:
        committed = re.match(r"COMMIT \d+ \(at (.+)\)$", line)
        if committed:
            history.extend(change + (timestamp(committed.group(1)),) for change in pending)
            pending = []
            continue
        written = re.match(r"table \S*fenced_lease_state: (INSERT|UPDATE|DELETE): (.*)$", line)
        if not written:
            continue
        row = {name: None if value == "null" else value.strip("'").replace("''", "'")
               for name, value in field.findall(written.group(2))}
        if int(row["ns"]) != NS:
            continue
        if written.group(1) == "DELETE":
            pending.append((int(row["id"]), None, None, None, None))
            continue
        pending.append((int(row["id"]), row["owner"], int(row["token"]),
                        row["acquired_at"] and timestamp(row["acquired_at"]),
                        row["expires_at"] and timestamp(row["expires_at"])))
    return history


with psycopg.connect(**DIRECT) as check:
    history = lease_history(check.execute(
        "SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, 'include-timestamp', 'on')",
        (SLOT,)).fetchall())
    writes = check.execute("SELECT id, owner, token FROM lease_writes").fetchall()
    check.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
    check.execute("DROP TABLE lease_writes")

holdings = 0
held = set()  # (key, owner, token) of every holding
for key in range(KEYS):
    current = None  # (owner, token, acquired_at, end): end = release time, or last expiry
    tokens = []
    for _, owner, token, acquired_at, expires_at, changed_at in (h for h in history
                                                                  if h[0] == key):
        if owner is None:  # released
            if current is not None:
                current = (current[0], current[1], current[2], changed_at)
            continue
        if current is not None and token == current[1]:  # renewed or extended
            current = (owner, token, current[2], expires_at)
            continue
        holdings += 1
        if current is not None and acquired_at < current[3]:
            errors.append(f"key {key}: {owner} took token {token} at {acquired_at}, before "
                          f"{current[0]}'s token {current[1]} ended at {current[3]}")
        tokens.append(token)
        held.add((key, owner, token))
        current = (owner, token, acquired_at, expires_at)
    # A release that found its lease gone: the TTL ran out on a busy machine, and a later
    # holder took the key (never the same token twice).
    errors.extend(f"key {key}: release of token {token} failed, yet nobody took over"
                  for lost_key, token in lost if lost_key == key and token >= tokens[-1])
    if tokens != sorted(set(tokens)):
        errors.append(f"key {key}: tokens not unique and rising: {tokens}")
if holdings < CLIENTS * CYCLES // 4:
    errors.append(f"only {holdings} holdings in {CLIENTS * CYCLES} cycles")
if not writes:
    errors.append("no fenced write ran")
errors.extend(f"write {write} outside every holding" for write in writes
              if tuple(write) not in held)

if errors:
    print(f"psycopg pooled lease_stress: FAILED: {errors[:5]}")
    sys.exit(1)
print(f"psycopg pooled lease_stress: ok ({holdings} holdings, {len(writes)} fenced writes, "
      f"{len(lost)} leases lost to expiry before their release)")
