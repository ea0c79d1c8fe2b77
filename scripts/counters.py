"""The protected data of the failure experiments (`make compare`, `make ha`), on a PostgreSQL
server of their own: one counter row per trial and key (`id`). A holder claims the row with
its token before reading it and writes the value + 1 back with it; every write records
itself in `writes`, in the same transaction, with whether the resource accepted it, so that
the accepted ones are the resource's commits in its own order (an accepted write holds its
row's lock until it commits)."""

import json

import psycopg2


class Counters:
    SCHEMA = """
    CREATE EXTENSION IF NOT EXISTS fenced_lock;
    CREATE TABLE IF NOT EXISTS counters (id int PRIMARY KEY, value bigint NOT NULL,
                                         fence bigint);
    CREATE TABLE IF NOT EXISTS writes (seq bigserial PRIMARY KEY, id int, worker text,
                                       token bigint, read_value bigint, granted_ns bigint,
                                       wrote_ns bigint, accepted boolean);
    """

    def __init__(self, dsn):
        self.conn = psycopg2.connect(dsn)

    def read(self, check, row, token):
        """The counter, read under the holder's token where the system has one: the row is
        first claimed with it (fenced_update with no changes; by hand, the guarded UPDATE of
        the fence alone), so that an older holder's write after this read is refused. None
        when the claim is refused: a newer holder has been here."""
        with self.conn.cursor() as cursor:
            if check is not None and not self.guarded_update(cursor, check, row, token, None):
                self.conn.commit()
                return None
            cursor.execute("SELECT value FROM counters WHERE id = %s", (row,))
            value = cursor.fetchone()[0]
        self.conn.commit()
        return value

    @staticmethod
    def guarded_update(cursor, check, row, token, value):
        """Sets the fence to `token` (and the counter to `value`, unless None) if no higher
        token was accepted. True if written."""
        changes = {} if value is None else {"value": value}
        if check == "fenced_update":
            cursor.execute("SELECT fenced_update_or_false('counters', %s::int, %s, %s::jsonb)",
                           (row, token, json.dumps(changes)))
            return cursor.fetchone()[0]
        cursor.execute("UPDATE counters SET fence = %s, value = coalesce(%s, value) "
                       "WHERE id = %s AND (fence IS NULL OR fence <= %s)",
                       (token, value, row, token))
        return cursor.rowcount == 1

    def write(self, check, row, worker, token, value, granted_ns, wrote_ns):
        """`value` + 1 into `row`, guarded by `token` where the system has one (None for
        `value`: the read was refused, nothing is written); recorded. True if accepted."""
        with self.conn.cursor() as cursor:
            if value is None:
                accepted = False
            elif check is not None:
                accepted = self.guarded_update(cursor, check, row, token, value + 1)
            else:
                cursor.execute("UPDATE counters SET value = %s WHERE id = %s", (value + 1, row))
                accepted = True
            cursor.execute("INSERT INTO writes (id, worker, token, read_value, granted_ns, "
                           "wrote_ns, accepted) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                           (row, worker, token, value, granted_ns, wrote_ns, accepted))
        self.conn.commit()
        return accepted

    def close(self):
        self.conn.close()


def reset_rows(dsn, first_row, keys):
    """Creates (or sets back to 0, without a fence) the rows first_row + key of a trial."""
    with psycopg2.connect(dsn) as conn:
        conn.cursor().execute(
            "INSERT INTO counters SELECT %s + key, 0, NULL FROM unnest(%s::int[]) key "
            "ON CONFLICT (id) DO UPDATE SET value = 0, fence = NULL", (first_row, list(keys)))
    conn.close()


def create_schema(dsn):
    with psycopg2.connect(dsn) as conn:
        conn.cursor().execute(Counters.SCHEMA)
    conn.close()


def commits(dsn, first_row, rows):
    """The accepted writes to rows first_row .. first_row + rows - 1 in commit order, as the
    checker takes them: (seq, key, worker, token, grant, read), the key counted from
    first_row."""
    with psycopg2.connect(dsn) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT seq, id - %s, worker, token, granted_ns, read_value FROM writes "
                       "WHERE id >= %s AND id < %s AND accepted ORDER BY seq",
                       (first_row, first_row, first_row + rows))
        found = cursor.fetchall()
    conn.close()
    return found
