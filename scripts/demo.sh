#!/usr/bin/env bash
# Two sessions contend for key (1001, 42): A takes it and holds it for two seconds; B asks
# meanwhile, waits until A commits, and is granted a larger token. While B waits, a third
# session shows both in the fenced_locks view.
set -euo pipefail
url=$1

echo "== Session A: BEGIN; SELECT acquire_fenced(1001, 42); ... holds it for 2 s ... COMMIT;"
echo "== Session B (starts 0.5 s later): BEGIN; SELECT acquire_fenced(1001, 42); COMMIT;"
PGAPPNAME=demo_session_a psql "$url" -qXAt -F ' ' <<'SQL' | sed 's/^/   A: /' &
BEGIN;
SELECT acquire_fenced(1001, 42) AS token \gset
SELECT 'granted at', pg_catalog.to_char(pg_catalog.clock_timestamp(), 'HH24:MI:SS.MS'),
       'token', :token;
SELECT pg_catalog.pg_sleep(2) \g /dev/null
SELECT 'commits at', pg_catalog.to_char(pg_catalog.clock_timestamp(), 'HH24:MI:SS.MS');
COMMIT;
SQL
sleep 0.5
PGAPPNAME=demo_session_b psql "$url" -qXAt -F ' ' <<'SQL' | sed 's/^/   B: /' &
BEGIN;
SELECT 'asks at', pg_catalog.to_char(pg_catalog.clock_timestamp(), 'HH24:MI:SS.MS');
SELECT acquire_fenced(1001, 42) AS token \gset
SELECT 'granted at', pg_catalog.to_char(pg_catalog.clock_timestamp(), 'HH24:MI:SS.MS'),
       'token', :token;
COMMIT;
SQL
sleep 0.5
echo "== Meanwhile, from a third session: SELECT ... FROM fenced_locks;"
psql "$url" -qX -c "SELECT ns, namespace, id, pid, granted, token, scope,
       date_trunc('milliseconds', waiting) AS waiting, blocked_by, application_name
  FROM fenced_locks ORDER BY granted DESC, wait_started"
wait
echo "== B waited for A's COMMIT and got a larger token: a write A sends late with its"
echo "   smaller token is refused by any resource that keeps the highest token it saw."
