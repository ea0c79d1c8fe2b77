#!/usr/bin/env bash
# The driver suite: the same patterns (pg_test/drivers/*) run by ten drivers, each sending
# parameters as it does by default, against the test server whose socket directory is $1 and
# directory $2, directly and through PgBouncer in transaction mode with the settings the
# README gives for it. Installs the pinned drivers from their registries when missing (PyPI and
# npm under build/drivers; Debian's are installed by scripts/setup.sh).
#
# Then the mixed workload, through PgBouncer (pool of 4 server connections): per driver, two
# processes at once, each with 6 connections running 150 transactions of five kinds picked at
# random (acquire_fenced, try_acquire_fenced, current_fence, try_acquire_fenced_session + release_fenced,
# acquire_fenced + fenced_update) on keys nobody else uses. Every answer is checked against
# what was asked: a token must be the one fenced_locks shows for this server connection, a
# free key has no fence, a write with a fresh token succeeds. With the README's settings no
# transaction may go wrong or fail; the control runs each driver that prepares statements by
# default (or, for node-postgres and rust-postgres, the way the README warns against) and must
# show transactions going wrong or failing, or the process dying: proof that the setting is
# what prevents it. Prints every line and "drivers: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."

host=$1
# The server's directory: PgBouncer is put in front of it by scripts/pg.sh.
server=$2
ROOT=$PWD/build/drivers
DATABASE=fenced_lock_drivers
mkdir -p "$ROOT"

# Drivers, pinned.
# SQLAlchemy's asyncio engine needs greenlet, which 2.1 installs only with [asyncio].
PYPI=('psycopg[binary]==3.3.9' 'asyncpg==0.32.0' 'SQLAlchemy[asyncio]==2.1.9' 'greenlet==3.5.6')
if [ "$("$ROOT/venv/bin/python" -c 'import psycopg, asyncpg, sqlalchemy, greenlet
print(psycopg.__version__, asyncpg.__version__, sqlalchemy.__version__, greenlet.__version__)' 2>/dev/null)" != "3.3.9 0.32.0 2.1.9 3.5.6" ]; then
    python3 -m venv "$ROOT/venv"
    "$ROOT/venv/bin/pip" install -q --no-cache-dir "${PYPI[@]}" </dev/null
fi
if [ ! -f "$ROOT/node/node_modules/pg/package.json" ] ||
    ! grep -q '"version": "8.23.1"' "$ROOT/node/node_modules/pg/package.json"; then
    mkdir -p "$ROOT/node"
    cp pg_test/drivers/node/package.json "$ROOT/node/"
    # npm's cache stays in the checkout, not in ~/.npm.
    (cd "$ROOT/node" && npm install --silent --no-audit --no-fund --cache "$ROOT/npm-cache" </dev/null)
fi
cargo build -q --manifest-path pg_test/drivers/rust/Cargo.toml --target-dir target/faults
# pgx v4 from Debian's Go sources, offline; Go's build cache stays in the checkout.
(cd pg_test/drivers/go && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$ROOT/go-cache" \
    go build -o "$ROOT/go/patterns" .)
JDBC=/usr/share/java/postgresql.jar
# A JVM writes its performance data to /tmp/hsperfdata_USER unless told not to, and leaves the
# directory behind: outside the checkout.
perf_data=/tmp/hsperfdata_$(id -un)
perf_data_before=$([ -e "$perf_data" ] && echo yes)
javac -J-XX:-UsePerfData -d "$ROOT/java" -cp "$JDBC" pg_test/drivers/java/Patterns.java

# The database, and PgBouncer in transaction mode in front of it, on a socket of its own.
psql "host=$host user=postgres dbname=postgres" -qX -c "DROP DATABASE IF EXISTS $DATABASE" \
    -c "CREATE DATABASE $DATABASE"
psql "host=$host user=postgres dbname=$DATABASE" -qX -c "CREATE EXTENSION fenced_lock" \
    -c "CREATE TABLE driver_rows (id int PRIMARY KEY, fence bigint, v text)" \
    -c "INSERT INTO driver_rows SELECT g, NULL, NULL FROM generate_series(1, 4000) g" \
    -c "SELECT register_namespace('drivers', 4202)" >/dev/null
bouncer=$ROOT/pgbouncer
scripts/pg.sh bouncer-stop "$bouncer"
scripts/pg.sh bouncer "$bouncer" "$server" "$DATABASE"
trap 'scripts/pg.sh bouncer-stop "$bouncer"' EXIT
bouncer_sockets=$(scripts/pg.sh socket "$bouncer")

export DRIVERS_HOST=$host DRIVERS_PORT=5432 DRIVERS_POOLED_HOST=$bouncer_sockets \
    DRIVERS_POOLED_PORT=5432 DRIVERS_DATABASE=$DATABASE NODE_PATH=$ROOT/node/node_modules

python=("$ROOT/venv/bin/python" pg_test/drivers/python/patterns.py)
# Each driver: its name, the command that runs it (then ROUTE, or mixed SETTINGS N), and the
# settings of its control ("" when it prepares nothing by default).
DRIVERS=(
    "psycopg|${python[*]} psycopg|defaults"
    "asyncpg|${python[*]} asyncpg|defaults"
    "sqlalchemy-psycopg|${python[*]} sqlalchemy-psycopg|defaults"
    "sqlalchemy-asyncpg|${python[*]} sqlalchemy-asyncpg|defaults"
    "node-postgres|node pg_test/drivers/node/patterns.js|named"
    "rust-postgres|target/faults/debug/fenced_lock_driver_suite|reused"
    "jdbc|java -XX:-UsePerfData -cp $ROOT/java:$JDBC Patterns|defaults"
    "pgx|$ROOT/go/patterns|defaults"
    "ruby-pg|ruby pg_test/drivers/ruby/patterns.rb|"
    "DBD::Pg|perl pg_test/drivers/perl/patterns.pl|defaults"
    "php-pgsql|php pg_test/drivers/php/patterns.php pgsql|"
    "php-pdo|php -d memory_limit=256M pg_test/drivers/php/patterns.php pdo|defaults"
)

# Two processes of the mixed workload at once; prints their lines and one result line.
slot=0
mixed() {
    local name=$1 command=$2 settings=$3 control=$4 lines total
    slot=$((slot + 1))
    # shellcheck disable=SC2086 # the command is words
    lines=$(for process in 0 1; do
        MIXED_SLOT=$slot timeout 120 $command mixed "$settings" $process 2>&1 &
    done; wait)
    echo "$lines" | grep ' mixed '
    # Transactions that went wrong or failed, and processes that died without their line.
    total=$(grep -oE '[0-9]+ wrong, [0-9]+ errors' <<<"$lines" | awk '{ n += $1 + $3 } END { print n + 0 }')
    total=$((total + 2 - $(grep -c ' mixed .*transactions' <<<"$lines")))
    if [ -z "$control" ]; then
        ((total == 0)) && echo "$name mixed $settings: ok (300 transactions, none crossed)" ||
            echo "$name mixed $settings: FAILED: $total transactions went wrong or failed"
    else
        ((total > 0)) && echo "$name control ($settings): ok ($total went wrong, failed or died)" ||
            echo "$name control ($settings): FAILED: nothing went wrong without the README's setting"
    fi
}

output=$(
    for driver in "${DRIVERS[@]}"; do
        IFS='|' read -r name command control <<<"$driver"
        for route in direct pooled; do
            # shellcheck disable=SC2086 # the command is words
            lines=$($command $route 2>&1) || true
            grep -E ': (ok|FAILED)' <<<"$lines" ||
                echo "$name $route: FAILED: no pattern ran: $(tail -3 <<<"$lines" | tr '\n' ' ')"
        done
    done
    "$ROOT/venv/bin/python" pg_test/drivers/python/lease_stress.py 2>&1
    for driver in "${DRIVERS[@]}"; do
        IFS='|' read -r name command control <<<"$driver"
        mixed "$name" "$command" documented ""
    done
    # The controls last: they can leave session locks on the pooled server connections.
    for driver in "${DRIVERS[@]}"; do
        IFS='|' read -r name command control <<<"$driver"
        [ -n "$control" ] && mixed "$name" "$command" "$control" yes
    done
    if [ -z "$perf_data_before" ] && [ -e "$perf_data" ]; then
        echo "java: FAILED: the JVMs left $perf_data behind"
    else
        echo "java: ok (no performance data left in /tmp)"
    fi
)
echo "$output"
passed=$(grep -cE ': ok( |$)' <<<"$output")
failed=$(grep -c ': FAILED' <<<"$output")
# A line per pattern: the Python drivers 14 direct and 13 pooled, node-postgres and
# rust-postgres 13 and 12, the others 12 and 11 (lease_wait needs threads: Python only;
# many_keys: Python, node-postgres and rust-postgres); the lease stress run; a mixed line per
# driver and one per control; the JVMs' leftovers.
controls=$(printf '%s\n' "${DRIVERS[@]}" | grep -c '|[a-z]\+$')
expected=$((4 * (14 + 13) + 2 * (13 + 12) + 6 * (12 + 11) + 1 + ${#DRIVERS[@]} + controls + 1))
if ((passed + failed != expected)); then
    echo "drivers: expected $expected result lines, got $((passed + failed))"
    failed=$((failed + expected - passed - failed))
fi
echo "drivers: $passed passed, $failed failed"
((failed == 0))
