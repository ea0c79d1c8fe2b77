#!/usr/bin/env bash
# Runs the SQL-level suites against a fresh server on 127.0.0.1: pg_regress (pg_test/sql),
# isolation specs (pg_test/specs) and the hot-standby suite (pg_test/standby) against a
# streaming replica of that server. Servers are stopped on exit, pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${TEST_PORT:-54316}
STANDBY_PORT=${STANDBY_PORT:-54317}
PGXS=/usr/lib/postgresql/15/lib/pgxs/src/test
ROOT=$PWD/build/sql-tests
PRIMARY=$ROOT/primary
STANDBY=$ROOT/standby

cleanup() {
    scripts/pg.sh stop "$STANDBY" || true
    scripts/pg.sh stop "$PRIMARY" || true
}
trap cleanup EXIT

cleanup
rm -rf "$ROOT"
mkdir -p "$ROOT"
# A small lock table, so the exhaustion test fills it quickly. A standby needs the same
# values (or larger) to replay the primary's WAL. A synchronous standby that never connects
# lets sync_replication.sql cancel a token's wait; commits do not wait (synchronous_commit).
SETTINGS=(-c max_locks_per_transaction=32 -c max_connections=30 -c max_prepared_transactions=2
    -c synchronous_standby_names=nobody -c synchronous_commit=local)
# The primary preloads fenced_lock (grants table, 64 entries so the overflow case is cheap to
# reach); the standby does not, which the standby suite uses to check the fallback.
scripts/pg.sh start "$PRIMARY" "$PORT" "${SETTINGS[@]}" \
    -c shared_preload_libraries=fenced_lock -c fenced_lock.max_grants=64

connection=(--host=127.0.0.1 --port="$PORT" --user=postgres)
status=0
show_diffs() { [ -f "$1/regression.diffs" ] && cat "$1/regression.diffs"; }

tests=$(cd pg_test/sql && ls ./*.sql | sed 's|^\./||; s|\.sql$||')
"$PGXS/regress/pg_regress" "${connection[@]}" --inputdir=pg_test --outputdir="$ROOT/regress" \
    --dbname=fenced_lock_regress --load-extension=fenced_lock $tests ||
    { status=1; show_diffs "$ROOT/regress"; }

specs=$(cd pg_test/specs && ls ./*.spec | sed 's|^\./||; s|\.spec$||')
"$PGXS/isolation/pg_isolation_regress" "${connection[@]}" --inputdir=pg_test \
    --outputdir="$ROOT/isolation" --dbname=fenced_lock_isolation --load-extension=fenced_lock \
    $specs || { status=1; show_diffs "$ROOT/isolation"; }

# Hot standby: a database with the extension, replicated, then the standby suite against it.
psql "postgresql://postgres@127.0.0.1:$PORT/postgres" -qXc "CREATE DATABASE fenced_lock_standby" \
    -c "\\c fenced_lock_standby" -c "CREATE EXTENSION fenced_lock"
scripts/pg.sh standby "$STANDBY" "$STANDBY_PORT" "$PORT" "${SETTINGS[@]}"
standby_tests=$(cd pg_test/standby/sql && ls ./*.sql | sed 's|^\./||; s|\.sql$||')
"$PGXS/regress/pg_regress" --host=127.0.0.1 --port="$STANDBY_PORT" --user=postgres \
    --inputdir=pg_test/standby --outputdir="$ROOT/standby-regress" --use-existing \
    --dbname=fenced_lock_standby $standby_tests ||
    { status=1; show_diffs "$ROOT/standby-regress"; }

exit $status
