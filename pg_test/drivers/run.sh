#!/usr/bin/env bash
# The driver suite: the same patterns (pg_test/drivers/*) run by psycopg 3, asyncpg,
# node-postgres and rust-postgres, each sending parameters as it does by default, against the
# test server whose socket directory is $1, directly and through PgBouncer in transaction
# mode. Installs the pinned drivers from their registries when missing (under build/drivers).
# Prints every pattern's line and "drivers: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."

host=$1
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
# Its socket: in its directory unless that path is too long for a socket (scripts/pg.sh).
bouncer_sockets=$(scripts/pg.sh socket "$bouncer")
mkdir -p "$bouncer" "$bouncer_sockets"
cat >"$bouncer/pgbouncer.ini" <<INI
[databases]
$DATABASE = host=$host port=5432 dbname=$DATABASE user=postgres
[pgbouncer]
listen_addr =
listen_port = 6432
unix_socket_dir = $bouncer_sockets
auth_type = trust
auth_file = $bouncer/users.txt
pool_mode = transaction
max_client_conn = 50
default_pool_size = 4
pidfile = $bouncer/pgbouncer.pid
logfile = $bouncer/pgbouncer.log
INI
echo '"postgres" ""' >"$bouncer/users.txt"
chown -R postgres:postgres "$bouncer" "$bouncer_sockets"
runuser -u postgres -- pgbouncer -q "$bouncer/pgbouncer.ini" &
bouncer_pid=$!
trap 'kill $bouncer_pid 2>/dev/null; wait $bouncer_pid 2>/dev/null' EXIT
for _ in $(seq 50); do
    [ -S "$bouncer_sockets/.s.PGSQL.6432" ] && break
    sleep 0.1
done

export DRIVERS_HOST=$host DRIVERS_PORT=5432 DRIVERS_POOLED_HOST=$bouncer_sockets \
    DRIVERS_POOLED_PORT=6432 DRIVERS_DATABASE=$DATABASE
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
