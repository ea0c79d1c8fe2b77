#!/usr/bin/env bash
# `make clients`: each client library (clients/*/) built into the package users install,
# installed from it into a scratch environment under build/clients, and tested against a
# PostgreSQL server of its own (fenced_lock preloaded), directly and through PgBouncer in
# transaction mode: the conformance scenarios (clients/conformance.md) and the fault tests.
# Prints each library's lines and "clients (LANGUAGE): N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

ROOT=$PWD/build/clients
SERVER=$ROOT/pg
DATABASE=fenced_lock_clients
# What every start of the test server passes (the fault tests restart it the same way).
SERVER_OPTIONS="-c shared_preload_libraries=fenced_lock -c max_connections=200"
mkdir -p "$ROOT"

scripts/pg.sh stop "$SERVER"
scripts/pg.sh bouncer-stop "$ROOT/pgbouncer"
# shellcheck disable=SC2086 # the options are words
scripts/pg.sh start "$SERVER" $SERVER_OPTIONS || exit 1
trap 'scripts/pg.sh bouncer-stop "$ROOT/pgbouncer"; scripts/pg.sh stop "$SERVER"' EXIT
host=$(scripts/pg.sh socket "$SERVER")
psql "host=$host user=postgres dbname=postgres" -qX -c "DROP DATABASE IF EXISTS $DATABASE" \
    -c "CREATE DATABASE $DATABASE" >/dev/null || exit 1
psql "host=$host user=postgres dbname=$DATABASE" -qX -c "CREATE EXTENSION fenced_lock" \
    -c "CREATE TABLE documents (id int PRIMARY KEY, body text, fence bigint)" \
    -c "INSERT INTO documents SELECT g, NULL, NULL FROM generate_series(1, 1000) g" >/dev/null ||
    exit 1
scripts/pg.sh bouncer "$ROOT/pgbouncer" "$SERVER" "$DATABASE" || exit 1

export CLIENTS_DSN="host=$host user=postgres dbname=$DATABASE"
export CLIENTS_POOLED_DSN="host=$(scripts/pg.sh socket "$ROOT/pgbouncer") user=postgres dbname=$DATABASE"
export CLIENTS_SERVER_DIR=$SERVER CLIENTS_SERVER_OPTIONS=$SERVER_OPTIONS CLIENTS_WORK=$ROOT

# Python: the sdist and wheel `python -m build` makes, the wheel installed with pip into a
# venv of its own. The tests run from their folder, with PYTHONPATH for scripts/real_parts.py
# only, so `import fenced_lock` finds the installed wheel, never the source tree.
python_suite() {
    local venv=$ROOT/python/venv dist=$ROOT/python/dist
    scripts/venv.sh "$ROOT/python/build-venv" build==1.6.1 &&
        rm -rf "$dist" "$ROOT/python/source" &&
        # From a copy: setuptools writes its egg-info next to the sources.
        cp -r clients/python "$ROOT/python/source" &&
        "$ROOT/python/build-venv/bin/python" -m build --outdir "$dist" "$ROOT/python/source" \
            >"$ROOT/python/build.log" 2>&1 &&
        scripts/venv.sh "$venv" 'psycopg[binary]==3.3.9' pytest==9.2.0 mypy==2.4.1 &&
        "$venv/bin/pip" install -q --no-deps --force-reinstall "$dist"/fenced_lock-*.whl </dev/null ||
        { tail -20 "$ROOT/python/build.log"; return 1; }
    cd clients/python/tests &&
        PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$PWD/../../../scripts \
            "$venv/bin/python" -m pytest -p no:cacheprovider -q -rfE .
}

# pytest's last line: "N passed, M failed in S s" (either part absent when 0).
log=$ROOT/python.log
(python_suite) 2>&1 | tee "$log"
last=$(tail -1 "$log")
passed=$(grep -oE '[0-9]+ passed' <<<"$last" | grep -oE '[0-9]+' || echo 0)
failed=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$last" | awk '{ n += $1 } END { print n + 0 }')
if ((passed + failed == 0)); then failed=1; fi
echo "clients (python): $passed passed, $failed failed"
((failed == 0))
