#!/usr/bin/env bash
# The upgrade path, against the running test server whose socket directory is $1: create
# 0.1.0 (the script as shipped, sql/fenced_lock--0.1.0.sql), use it, ALTER EXTENSION UPDATE,
# then: the extension's catalog equals a fresh install's, the data and the token position
# survived, and the pg_regress suite passes on the upgraded database.
# Prints "upgrade: N passed, M failed" (and pg_regress's own summary line).
set -uo pipefail
cd "$(dirname "$0")/.."

host=$1
PGXS=/usr/lib/postgresql/15/lib/pgxs/src/test
OUT=$PWD/build/sql-tests/upgrade
mkdir -p "$OUT"
sql() { psql "host=$host user=postgres dbname=$1" -qXAt -v ON_ERROR_STOP=1 "${@:2}"; }
passed=0 failed=0
check() {
    if [ "$2" = "$3" ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "upgrade: $1: expected '$3', got '$2'"
    fi
}

sql postgres -c "DROP DATABASE IF EXISTS fenced_lock_upgraded" \
    -c "DROP DATABASE IF EXISTS fenced_lock_fresh" \
    -c "CREATE DATABASE fenced_lock_upgraded" -c "CREATE DATABASE fenced_lock_fresh"
sql fenced_lock_upgraded -c "CREATE EXTENSION fenced_lock VERSION '0.1.0'" \
    -c "SELECT register_namespace('upgrade-ns', 77, 'made on 0.1.0')" \
    -c "SELECT fence_check('upgrade-resource', 42)" \
    -c "BEGIN" -c "SELECT acquire_fenced(77, g) FROM generate_series(1, 5) g" -c "COMMIT" >/dev/null
# The last token drawn on 0.1.0 (the latest of all: tokens rise).
position=$(sql fenced_lock_upgraded -c "BEGIN" -c "SELECT acquire_fenced('upgrade-ns', 'order:1')" \
    -c "COMMIT")
named_key_010=$(sql fenced_lock_upgraded -c "SELECT fenced_key('order:1')")
sql fenced_lock_upgraded -c "ALTER EXTENSION fenced_lock UPDATE"
sql fenced_lock_fresh -c "CREATE EXTENSION fenced_lock"

check "version after ALTER EXTENSION UPDATE" \
    "$(sql fenced_lock_upgraded -c "SELECT extversion FROM pg_extension WHERE extname = 'fenced_lock'")" \
    "$(sql fenced_lock_fresh -c "SELECT extversion FROM pg_extension WHERE extname = 'fenced_lock'")"
sql fenced_lock_upgraded -f pg_test/upgrade/catalog.sql >"$OUT/catalog.upgraded"
sql fenced_lock_fresh -f pg_test/upgrade/catalog.sql >"$OUT/catalog.fresh"
if diff -u "$OUT/catalog.fresh" "$OUT/catalog.upgraded" >"$OUT/catalog.diff"; then
    check "catalog equals a fresh install's" same same
else
    cat "$OUT/catalog.diff"
    check "catalog equals a fresh install's ($OUT/catalog.diff)" different same
fi
check "namespace registered on 0.1.0" \
    "$(sql fenced_lock_upgraded -c "SELECT ns || ' ' || description FROM fenced_namespaces WHERE name = 'upgrade-ns'")" \
    "77 made on 0.1.0"
check "ledger row" \
    "$(sql fenced_lock_upgraded -c "SELECT token FROM fence_ledger WHERE resource = 'upgrade-resource'")" 42
check "tokens continue above 0.1.0's" \
    "$(sql fenced_lock_upgraded -c "BEGIN" -c "SELECT acquire_fenced(77, 99) > $position" -c "COMMIT")" t
check "a text key hashes as on 0.1.0" \
    "$(sql fenced_lock_upgraded -c "SELECT fenced_key('order:1')")" "$named_key_010"

# The suite expects a database without rows of its own.
sql fenced_lock_upgraded -c "DELETE FROM fence_ledger" -c "DELETE FROM fenced_namespaces"
tests=$(cd pg_test/sql && ls ./*.sql | sed 's|^\./||; s|\.sql$||')
if "$PGXS/regress/pg_regress" --host="$host" --user=postgres --inputdir=pg_test \
    --outputdir="$OUT/regress" --use-existing --dbname=fenced_lock_upgraded $tests >"$OUT/regress.log" 2>&1; then
    check "pg_regress suite on the upgraded database" ok ok
else
    cat "$OUT/regress.log"
    [ -f "$OUT/regress/regression.diffs" ] && cat "$OUT/regress/regression.diffs"
    check "pg_regress suite on the upgraded database" failed ok
fi
echo "upgrade: $passed passed, $failed failed"
((failed == 0))
