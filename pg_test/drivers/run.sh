#!/usr/bin/env bash
# The driver suite: the same patterns (pg_test/drivers/*) run by psycopg 3, asyncpg,
# node-postgres and rust-postgres, each sending parameters as it does by default, against the
# test server whose socket directory is $1 and directory $2, directly and through PgBouncer in transaction
# mode. Installs the pinned drivers from their registries when missing (under build/drivers).
# Prints every pattern's line and "drivers: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."

host=$1
# The server's directory: PgBouncer is put in front of it by scripts/pg.sh.
server=$2
ROOT=$PWD/build/drivers
DATABASE=fenced_lock_drivers
mkdir -p "$ROOT"

# Drivers, pinned.
if ! "$ROOT/venv/bin/python" -c 'import psycopg, asyncpg' 2>/dev/null ||
    [ "$("$ROOT/venv/bin/python" -c 'import psycopg, asyncpg; print(psycopg.__version__, asyncpg.__version__)')" != "3.3.9 0.32.0" ]; then
    python3 -m venv "$ROOT/venv"
    "$ROOT/venv/bin/pip" install -q 'psycopg[binary]==3.3.9' 'asyncpg==0.32.0' </dev/null
fi
if [ ! -f "$ROOT/node/node_modules/pg/package.json" ] ||
    ! grep -q '"version": "8.23.1"' "$ROOT/node/node_modules/pg/package.json"; then
    mkdir -p "$ROOT/node"
    cp pg_test/drivers/node/package.json "$ROOT/node/"
    (cd "$ROOT/node" && npm install --silent --no-audit --no-fund </dev/null)
fi
cargo build -q --manifest-path pg_test/drivers/rust/Cargo.toml --target-dir target/faults

# The database, and PgBouncer in transaction mode in front of it, on a socket of its own.
psql "host=$host user=postgres dbname=postgres" -qX -c "DROP DATABASE IF EXISTS $DATABASE" \
    -c "CREATE DATABASE $DATABASE"
psql "host=$host user=postgres dbname=$DATABASE" -qX -c "CREATE EXTENSION fenced_lock" \
    -c "CREATE TABLE driver_rows (id int PRIMARY KEY, fence bigint, v text)" \
    -c "INSERT INTO driver_rows SELECT g, NULL, NULL FROM generate_series(1, 1000) g" \
    -c "SELECT register_namespace('drivers', 4202)" >/dev/null
bouncer=$ROOT/pgbouncer
scripts/pg.sh bouncer-stop "$bouncer"
scripts/pg.sh bouncer "$bouncer" "$server" "$DATABASE"
trap 'scripts/pg.sh bouncer-stop "$bouncer"' EXIT
bouncer_sockets=$(scripts/pg.sh socket "$bouncer")

export DRIVERS_HOST=$host DRIVERS_PORT=5432 DRIVERS_POOLED_HOST=$bouncer_sockets \
    DRIVERS_POOLED_PORT=5432 DRIVERS_DATABASE=$DATABASE
output=$(
    for route in direct pooled; do
        "$ROOT/venv/bin/python" pg_test/drivers/python/patterns.py psycopg $route
        "$ROOT/venv/bin/python" pg_test/drivers/python/patterns.py asyncpg $route
        NODE_PATH=$ROOT/node/node_modules node pg_test/drivers/node/patterns.js $route
        target/faults/debug/fenced_lock_driver_suite $route
    done 2>&1
    "$ROOT/venv/bin/python" pg_test/drivers/python/lease_stress.py 2>&1
)
echo "$output"
passed=$(grep -cE ': ok( |$)' <<<"$output")
failed=$(grep -c ': FAILED' <<<"$output")
# Each run prints a line per pattern: for psycopg and asyncpg 10 direct and 9 pooled, for
# node-postgres and rust-postgres 9 and 8 (lease_wait needs threads: Python only); then the
# lease stress run through PgBouncer.
expected=$((2 * (10 + 9) + 2 * (9 + 8) + 1))
if ((passed + failed != expected)); then
    echo "drivers: expected $expected pattern lines, got $((passed + failed))"
    failed=$((failed + expected - passed - failed))
fi
echo "drivers: $passed passed, $failed failed"
((failed == 0))
