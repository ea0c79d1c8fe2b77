#!/usr/bin/env bash
# Runs the SQL-level suites against a fresh server listening on its own Unix socket:
# pg_regress (pg_test/sql), isolation specs (pg_test/specs) and the hot-standby suite
# (pg_test/standby) against a streaming replica of that server. Servers are stopped on exit,
# pass or fail. Prints one summary line per suite: "<suite>: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."

# PG selects the major (scripts/pg-config.sh): 15 runs every suite below; 16 and 18 run
# pg_regress, the isolation specs, the upgrade chain, the monitoring suite and the standby
# suite. SQL_SUITES
# limits the run to some of them ("regress upgrade": the package test), SQL_TESTS_ROOT and
# SUITE_SUFFIX give that run its own directory and summary names.
PG=${PG:-15}
SQL_SUITES=${SQL_SUITES:-regress isolation collation upgrade readme drivers monitoring standby}
PG_CONFIG=$(scripts/pg-config.sh "$PG")
export PG_BIN PGXS
PG_BIN=$("$PG_CONFIG" --bindir)
PGXS=$(dirname "$("$PG_CONFIG" --pgxs)")/../test
ROOT=${SQL_TESTS_ROOT:-$PWD/build/sql-tests$([ "$PG" = 15 ] || echo "-pg$PG")}
PATH=$PG_BIN:$PATH
# Summary lines name the major when it is not 15.
export SUITE_SUFFIX=${SUITE_SUFFIX-$([ "$PG" = 15 ] || echo " (pg$PG)")}
# Whether suite $1 is one of this run's.
wanted() { [[ " $SQL_SUITES " == *" $1 "* ]]; }
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
# values (or larger) to replay the primary's WAL. Logical decoding: the driver suite's lease
# stress reads every committed change of the lease table from a test_decoding slot.
SETTINGS=(-c max_locks_per_transaction=32 -c max_connections=30 -c max_prepared_transactions=2
    -c wal_level=logical)
# The primary preloads fenced_lock (grants table, 64 entries so the overflow case is cheap to
# reach); the standby does not, which the standby suite uses to check the fallback. The
# primary runs with RUST_BACKTRACE=1 in its environment: no error of fenced_lock may carry a
# Rust backtrace (error_fields.sql checks the fields clients see).
# Room in the counter tables for every table and namespace the suites count (the upgrade chain
# runs pg_regress in three more databases): pg_test/sql/stats.sql reads its own rows.
RUST_BACKTRACE=1 scripts/pg.sh start "$PRIMARY" "${SETTINGS[@]}" \
    -c shared_preload_libraries=fenced_lock -c fenced_lock.max_grants=64 \
    -c fenced_lock.stats_max_tables=4096 -c fenced_lock.stats_max_namespaces=4096
host=$(scripts/pg.sh socket "$PRIMARY")

status=0
# Runs one suite; prints its summary line from the runner's own result lines.
suite() {
    local name=$1 outdir=$2
    shift 2
    local output rc=0
    output=$("$@" --bindir="$PG_BIN" 2>&1) || rc=1
    echo "$output"
    [ -f "$outdir/regression.diffs" ] && cat "$outdir/regression.diffs"
    local passed failed
    # pg_regress 15 prints "test NAME ... ok"; 16 and later print TAP ("ok N - NAME").
    passed=$(grep -cE '^test .*\.\.\. ok|^ok [0-9]' <<<"$output" || true)
    failed=$(grep -cE '^test .*\.\.\. FAILED|^not ok [0-9]' <<<"$output" || true)
    # A runner that failed without a failed test (it could not even start) failed once.
    if ((rc != 0)); then
        status=1
        ((failed > 0)) || failed=1
    fi
    echo "$name$SUITE_SUFFIX: $passed passed, $failed failed"
}

tests=$(cd pg_test/sql && ls ./*.sql | sed 's|^\./||; s|\.sql$||')
wanted regress && suite regress "$ROOT/regress" "$PGXS/regress/pg_regress" --host="$host" --user=postgres \
    --inputdir=pg_test --outputdir="$ROOT/regress" --dbname=fenced_lock_regress \
    --load-extension=fenced_lock $tests

specs=$(cd pg_test/specs && ls ./*.spec | sed 's|^\./||; s|\.spec$||')
wanted isolation && suite isolation "$ROOT/isolation" "$PGXS/isolation/pg_isolation_regress" --host="$host" \
    --user=postgres --inputdir=pg_test --outputdir="$ROOT/isolation" \
    --dbname=fenced_lock_isolation --load-extension=fenced_lock $specs

# The upgrade chain from 0.1.0 and 0.2.0 (scripts/upgrade-test.sh prints its own summary line).
if wanted upgrade; then
    scripts/upgrade-test.sh "$host" "$ROOT/upgrade" || status=1
fi

if [ "$PG" = 15 ] && wanted collation; then
# Named keys in databases whose collation is not C: ICU, and libc's en_US.UTF-8.
psql "host=$host user=postgres dbname=postgres" -qX \
    -c "CREATE DATABASE fenced_lock_icu TEMPLATE template0 LOCALE_PROVIDER icu
        ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'" \
    -c "CREATE DATABASE fenced_lock_en_us TEMPLATE template0 LOCALE 'en_US.UTF-8'"
for database in fenced_lock_icu fenced_lock_en_us; do
    psql "host=$host user=postgres dbname=$database" -qXc "CREATE EXTENSION fenced_lock"
    suite "collation ($database)" "$ROOT/$database" "$PGXS/regress/pg_regress" --host="$host" \
        --user=postgres --inputdir=pg_test/collation --outputdir="$ROOT/$database" \
        --use-existing --dbname=$database collation
done
fi

# Every SQL example of the README, pasted into psql (its own summary line).
if [ "$PG" = 15 ] && wanted readme; then
    scripts/readme-test.sh "$host" || status=1
fi

# The driver suite: ten drivers, directly and through PgBouncer, and the mixed workload with
# its controls (its own summary line).
if [ "$PG" = 15 ] && wanted drivers; then
    pg_test/drivers/run.sh "$host" "$PRIMARY" || status=1
fi

# The counters as a DBA sees them: Debian's Prometheus exporter with contrib/'s queries, the
# log, wait events, restarts (a server of its own; its own summary line).
if wanted monitoring; then
    pg_test/monitoring/run.py "$ROOT/monitoring" || status=1
fi

# Hot standby: a database with the extension, replicated, then the standby suite against it.
wanted standby || exit $status
psql "host=$host user=postgres dbname=postgres" -qXc "CREATE DATABASE fenced_lock_standby" \
    -c "\\c fenced_lock_standby" -c "CREATE EXTENSION fenced_lock"
scripts/pg.sh standby "$STANDBY" "$PRIMARY" "${SETTINGS[@]}"
standby_tests=$(cd pg_test/standby/sql && ls ./*.sql | sed 's|^\./||; s|\.sql$||')
suite standby "$ROOT/standby-regress" "$PGXS/regress/pg_regress" \
    --host="$(scripts/pg.sh socket "$STANDBY")" --user=postgres --inputdir=pg_test/standby \
    --outputdir="$ROOT/standby-regress" --use-existing --dbname=fenced_lock_standby \
    $standby_tests

exit $status
