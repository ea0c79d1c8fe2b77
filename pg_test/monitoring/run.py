#!/usr/bin/env python3
"""The monitoring suite: fenced_lock_stats and fenced_lock_refusals as a DBA sees them, on a
server of its own (fenced_lock preloaded) in directory argv[1].

- Debian's prometheus-postgres-exporter, started with contrib/'s queries file as a pg_monitor
  role, scraped over HTTP on 127.0.0.1: the metrics are there, and move after a workload
  (acquisitions, a refused stale write, a lease taken over after expiry), another database's
  rows included.
- The refusal log and fenced_lock.log_waits, read from the server's log.
- A waiting lease acquire's wait event in pg_stat_activity: FencedLockLease on PostgreSQL 17
  and later, Extension before.
- The counters survive a clean restart and start from zero after a crash.
- Namespaces past fenced_lock.stats_max_namespaces, or past a database's half of them, count
  in the "other" row; the refusal log limits each table apart, whatever row counts it.
- Rows come free: a dropped database's, and every row at a reset (a clean restart brings none
  back).

PG_BIN (the major's bin directory) and SUITE_SUFFIX come from scripts/sql-tests.sh. Prints
each check and "monitoring: N passed, M failed".
"""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.abspath(sys.argv[1])
SERVER = os.path.join(ROOT, "server")
QUERIES = os.path.abspath("contrib/prometheus-postgres-exporter/queries.yaml")
EXPORTER = "prometheus-postgres-exporter"
DATABASE, OTHER = "fenced_lock_monitoring", "fenced_lock_monitoring_other"
# Small counter tables, so that their "other" rows are reached.
SETTINGS = ["-c", "shared_preload_libraries=fenced_lock", "-c", "fenced_lock.stats_max_namespaces=8",
            "-c", "fenced_lock.stats_max_tables=2"]
SUFFIX = os.environ.get("SUITE_SUFFIX", "")
results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok' if ok else 'FAILED'}: {name}" + ("" if ok else f" ({detail})"), flush=True)


def pg(*args):
    subprocess.run(["scripts/pg.sh", *args], check=True, stdout=subprocess.DEVNULL)


def socket_dir():
    return subprocess.run(["scripts/pg.sh", "socket", SERVER], check=True,
                          capture_output=True, text=True).stdout.strip()


def psql(sql, database=DATABASE, user="postgres", options=""):
    """The rows of the last statement of `sql`, as lists of text."""
    env = dict(os.environ, PGOPTIONS=options)
    out = subprocess.run(
        [os.path.join(os.environ["PG_BIN"], "psql"), "-XAtq", "-v", "ON_ERROR_STOP=1",
         "-F", "|", "-h", socket_dir(), "-U", user, "-d", database, "-c", sql],
        check=True, capture_output=True, text=True, env=env).stdout
    return [line.split("|") for line in out.splitlines()]


# A lease wait of 400 ms for an owner, which runs out (55P03) while w1 holds the lease.
WAIT_400_MS = ("DO $$ BEGIN PERFORM acquire_lease(5001, 9, '%s', '1 hour', '400 ms'); "
               "EXCEPTION WHEN lock_not_available THEN NULL; END $$")


def server_log():
    with open(os.path.join(SERVER, "server.log"), encoding="utf-8", errors="replace") as log:
        return log.read()


def free_port():
    """A free TCP port on 127.0.0.1 below the ephemeral range (32768-60999)."""
    for port in range(21000 + os.getpid() % 5000, 32000):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port below 32000")


def scrape(port):
    """{(metric, frozenset of label pairs): value} of the exporter's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    metrics = {}
    for line in text.splitlines():
        match = re.match(r"^(fenced_lock_\w+)\{(.*)\} (\S+)$", line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            metrics[(match.group(1), labels - {("server", dict(labels).get("server"))})] = \
                float(match.group(3))
    return metrics


def value(metrics, name, **labels):
    return metrics.get((name, frozenset(labels.items())))


def major():
    return int(psql("SHOW server_version_num")[0][0]) // 10000


def main():
    os.makedirs(ROOT, exist_ok=True)
    pg("stop", SERVER)
    subprocess.run(["rm", "-rf", SERVER], check=True)
    pg("start", SERVER, *SETTINGS)
    exporter = None
    try:
        for database in (DATABASE, OTHER):
            psql(f"CREATE DATABASE {database}", database="postgres")
            psql("CREATE EXTENSION fenced_lock", database=database)
        psql("CREATE ROLE fenced_exporter LOGIN IN ROLE pg_monitor")
        psql("SELECT register_namespace('jobs', 5001)")

        port = free_port()
        env = dict(os.environ, DATA_SOURCE_NAME=(
            f"host={socket_dir()} user=fenced_exporter dbname={DATABASE} sslmode=disable"))
        exporter = subprocess.Popen(
            [EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
             f"--extend.query-path={QUERIES}", "--disable-default-metrics",
             "--disable-settings-metrics"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(ROOT, "exporter.log"), "w"))
        before = None
        for _ in range(100):
            try:
                before = scrape(port)
                break
            except OSError:
                time.sleep(0.1)
        check("the exporter serves fenced_lock's metrics",
              before is not None and value(before, "fenced_lock_stats_acquired_immediately",
                                           database="other", namespace="other") == 0,
              f"scrape: {before}")

        # The workload: three locks, a write accepted then a stale one refused, a lease taken
        # over after its holder's expiry; one lock in another database.
        for _ in range(3):
            psql("BEGIN; SELECT acquire_fenced(5001, 1); COMMIT;")
        psql("BEGIN; SELECT acquire_fenced(5002, 1); COMMIT;", database=OTHER)
        psql("CREATE TABLE jobs (id int PRIMARY KEY, fence bigint); INSERT INTO jobs VALUES (1, NULL)")
        psql("SELECT fenced_update_or_false('jobs', 1, 100), fenced_update_or_false('jobs', 1, 99)")
        psql("SELECT try_acquire_lease(5001, 2, 'w1', '10 ms'); SELECT pg_sleep(0.05);"
             "SELECT try_acquire_lease(5001, 2, 'w2', '1 hour')")
        after = scrape(port)
        moved = {
            ("fenced_lock_stats_acquired_immediately", (DATABASE, "jobs")): 3,
            ("fenced_lock_stats_tokens_issued", (DATABASE, "jobs")): 5,
            ("fenced_lock_stats_leases_taken_over", (DATABASE, "jobs")): 1,
            ("fenced_lock_stats_acquired_immediately", (OTHER, "5002")): 1,
        }
        for (name, (database, namespace)), expected in moved.items():
            got = value(after, name, database=database, namespace=namespace)
            check(f"{name} of {database}/{namespace} moved to {expected}", got == expected,
                  f"got {got}")
        for name, expected in (("refused", 1), ("accepted", 1), ("last_refused_token", 99),
                               ("highest_accepted_token", 100)):
            got = value(after, f"fenced_lock_refusals_{name}", database=DATABASE,
                        relation="jobs", checked_by="fenced_update_or_false")
            check(f"fenced_lock_refusals_{name} of jobs is {expected}", got == expected,
                  f"got {got}")
        check("the exporter's role sees another database's rows through pg_monitor",
              any(dict(labels).get("database") == OTHER for (_, labels) in after))

        # The refusal log, and a lease wait longer than deadlock_timeout.
        log = server_log()
        check("the stale write is in the server's log",
              'fenced_update_or_false refused stale fencing token 99 for the row of public.jobs with '
              '"id" '
              "= 1: token 100 was already accepted" in log)
        psql("SELECT try_acquire_lease(5001, 9, 'w1', '1 hour')")
        psql(WAIT_400_MS % "w2", options="-c deadlock_timeout=100 -c fenced_lock.log_waits=on")
        log = server_log()
        check("log_waits: a lease wait past deadlock_timeout names its holder",
              re.search(r'fenced_lock: process \d+ still waiting for lease \(5001, 9\) held by '
                        r'owner "w1" with token \d+ after \d+\.\d+ ms', log), log[-2000:])
        check("log_waits: and its end",
              re.search(r"gave up waiting for lease \(5001, 9\) after \d+", log), log[-2000:])
        psql(WAIT_400_MS % "w3")
        check("log_waits off (the default): nothing logged",
              server_log().count("still waiting for lease (5001, 9)") == 1)

        # A waiting acquire's wait event, seen from another session; then w1's release hands
        # the lease over.
        waiter = subprocess.Popen(
            [os.path.join(os.environ["PG_BIN"], "psql"), "-XAtq", "-h", socket_dir(), "-U",
             "postgres", "-d", DATABASE, "-c",
             "SELECT acquire_lease(5001, 9, 'w4', '1 hour', '30 s') IS NOT NULL"],
            env=dict(os.environ, PGAPPNAME="lease_waiter"), stdout=subprocess.PIPE, text=True)
        seen = []
        for _ in range(100):
            seen = psql("SELECT wait_event_type, wait_event FROM pg_stat_activity "
                        "WHERE application_name = 'lease_waiter' AND state = 'active'")
            if seen and seen[0][0]:
                break
            time.sleep(0.05)
        expected = ["Extension", "FencedLockLease" if major() >= 17 else "Extension"]
        check(f"a waiting lease acquire shows as {expected[1]}", seen[:1] == [expected], seen)
        token = psql("SELECT token FROM fenced_leases WHERE ns = 5001 AND id = 9")[0][0]
        psql(f"SELECT release_lease(5001, 9, {token})")
        check("the waiter gets the released lease", waiter.communicate(timeout=30)[0].strip() == "t")

        # Ten more namespaces: this database takes half of the 8 rows (5001 and three of
        # these), and the rest count in "other", nothing lost; the other database still gets
        # rows of its own (fourth review of 0.4.0, item 2: one role filled every row).
        psql("BEGIN; SELECT acquire_fenced(ns, 1) FROM generate_series(6001, 6010) ns; COMMIT;")
        rows = psql("SELECT count(*) FILTER (WHERE dbid IS NOT NULL), "
                    "sum(acquired_immediately) FILTER (WHERE dbid IS NULL), "
                    "sum(acquired_immediately) FILTER (WHERE ns BETWEEN 6001 AND 6010 "
                    "OR dbid IS NULL) FROM fenced_lock_stats")
        check("a database's namespaces past half the rows count in the \"other\" row",
              rows[0][0] == "5" and int(rows[0][1]) > 0 and rows[0][2] == "10", rows)
        psql("BEGIN; SELECT acquire_fenced(7001, 1); COMMIT;", database=OTHER)
        rows = psql(f"SELECT acquired_immediately FROM fenced_lock_stats WHERE ns = 7001 "
                    f"AND database = '{OTHER}'")
        check("the other database's next namespace gets a row of its own", rows == [["1"]], rows)

        # Two tables counted in "other" (the refusal table's rows: 2, one a database): the
        # refusal log writes a line a second for each, not one for both (item 9: the limit
        # lived in the counting row).
        psql("CREATE TABLE jobs_old (id int PRIMARY KEY, fence bigint); INSERT INTO jobs_old VALUES (1, 50);"
             "CREATE TABLE jobs_new (id int PRIMARY KEY, fence bigint); INSERT INTO jobs_new VALUES (1, 50)")
        psql("SELECT fenced_update_or_false('jobs_old', 1, 40), fenced_update_or_false('jobs_new', 1, 40), "
             "fenced_update_or_false('jobs_old', 1, 41)")
        rows = psql("SELECT count(*) FROM fenced_lock_refusals WHERE relation::text LIKE 'jobs_%'")
        log = server_log()
        check("the refusal log limits each table apart, in \"other\" too",
              rows == [["0"]] and log.count("for the row of public.jobs_old") == 1
              and log.count("for the row of public.jobs_new") == 1, f"{rows} {log[-1500:]}")

        # Across a clean restart, and not across a crash.
        def refused():
            rows = psql("SELECT refused FROM fenced_lock_refusals WHERE relation = 'jobs'::regclass")
            return int(rows[0][0]) if rows else None
        pg("stop", SERVER)
        pg("start", SERVER, *SETTINGS)
        rows = psql("SELECT acquired_immediately FROM fenced_lock_stats WHERE ns = 5001 "
                    f"AND database = '{DATABASE}'")
        check("the counters survive a clean restart", rows == [["3"]] and refused() == 1,
              f"{rows} {refused()}")
        others = psql("SELECT (SELECT count(*) FROM fenced_lock_stats WHERE dbid IS NULL), "
                      "(SELECT count(*) FROM fenced_lock_refusals WHERE dbid IS NULL)")
        check("one \"other\" row in each view after the restart", others == [["1", "1"]], others)
        # The exporter's connection broke with the restart: it connects again at a scrape.
        # (Its first scrape may fail with HTTP 500: "bad connection".)
        scraped = None
        for _ in range(50):
            try:
                scraped = value(scrape(port), "fenced_lock_refusals_refused", database=DATABASE,
                                relation="jobs", checked_by="fenced_update_or_false")
            except OSError:
                scraped = None
            if scraped is not None:
                break
            time.sleep(0.2)
        check("the exporter scrapes them after the restart", scraped == 1, f"got {scraped}")
        pg("crash", SERVER)
        pg("start", SERVER, *SETTINGS)
        rows = psql("SELECT count(*) FROM fenced_lock_stats WHERE dbid IS NOT NULL")
        check("a crash starts them from zero", rows == [["0"]] and refused() is None,
              f"{rows} {refused()}")

        # Rows come free (item 2: none ever did): a dropped database's when a view is read,
        # and every one at a reset; a clean restart brings no empty row back.
        psql("BEGIN; SELECT acquire_fenced(7002, 1); COMMIT;", database=OTHER)
        psql("BEGIN; SELECT acquire_fenced(ns, 1) FROM generate_series(6001, 6010) ns; COMMIT;")
        psql(f"DROP DATABASE {OTHER}", database="postgres")
        rows = psql("SELECT count(*) FROM fenced_lock_stats "
                    "WHERE dbid NOT IN (SELECT oid FROM pg_database)")
        check("a dropped database's rows are freed", rows == [["0"]], rows)
        psql("SELECT fenced_lock_stats_reset()")
        pg("stop", SERVER)
        pg("start", SERVER, *SETTINGS)
        psql("BEGIN; SELECT acquire_fenced(7003, 1); COMMIT;")
        rows = psql("SELECT count(*) FILTER (WHERE dbid IS NOT NULL), "
                    "count(*) FILTER (WHERE ns = 7003) FROM fenced_lock_stats")
        check("a reset frees every row, and a clean restart brings none back",
              rows == [["1", "1"]], rows)

        # A count costs the same however many namespaces the backend counted before (item 11:
        # each count searched a list of every key the backend had ever counted: 20,000 new
        # namespaces after 40,000 took 8-11 s with counting on, 0.05 s off). The same session
        # grants with counting on and off, in one session: the ratio stays near 1.
        timed = psql("""
            CREATE FUNCTION pg_temp.session_grants(first int, n int) RETURNS float8
            LANGUAGE plpgsql AS $$
            DECLARE
                started timestamptz := clock_timestamp();
            BEGIN
                FOR ns IN first .. first + n - 1 LOOP
                    PERFORM try_acquire_fenced_session(ns, 1);
                    PERFORM release_fenced(ns, 1);
                END LOOP;
                RETURN extract(epoch FROM clock_timestamp() - started);
            END $$;
            CREATE FUNCTION pg_temp.on_and_off(OUT counting_on float8, OUT counting_off float8)
            LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_temp.session_grants(100000, 20000);
                counting_on := pg_temp.session_grants(120000, 10000);
                PERFORM set_config('fenced_lock.track', 'off', true);
                counting_off := pg_temp.session_grants(130000, 10000);
            END $$;
            SELECT * FROM pg_temp.on_and_off();""")
        counting_on, counting_off = (float(seconds) for seconds in timed[0])
        check("a count costs the same however many keys the backend counted before",
              counting_on < 3 * counting_off + 0.2, f"on {counting_on} s, off {counting_off} s")
    finally:
        if exporter:
            exporter.terminate()
            exporter.wait(timeout=30)
        pg("stop", SERVER)
    print(f"monitoring{SUFFIX}: {results['passed']} passed, {results['failed']} failed")
    return 0 if results["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
