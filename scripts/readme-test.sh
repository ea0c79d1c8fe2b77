#!/usr/bin/env bash
# Runs every ```sql block of README.md as a user would paste it into psql, in order, in one
# session on a new database of the test server whose socket directory is $1 (after
# pg_test/readme/setup.sql), and compares what psql prints with pg_test/readme/expected.out,
# which says what each example returns (errors by SQLSTATE; tokens, PIDs and times, which
# differ on every run, as TOKEN, PID and TIME; the alignment, which follows their widths, as
# single spaces and dashes). A README example that stops working, or whose
# answer changes, fails here. Prints "readme: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

host=$1
ROOT=build/readme-test
DATABASE=fenced_lock_readme
mkdir -p "$ROOT"
PGOPTIONS="-c client_min_messages=warning" psql "host=$host user=postgres dbname=postgres" -qX \
    -c "DROP DATABASE IF EXISTS $DATABASE" \
    -c "CREATE DATABASE $DATABASE"
# The blocks, each introduced by the heading of its section (line numbers would change the
# expected output at every edit above a block).
awk '/^#/ && !fenced { heading = $0; gsub(/[^A-Za-z0-9 #:,.()_-]/, "", heading) }
     /^```/ { fenced = !fenced }
     /^```sql$/ { inside = 1; print "\\echo ---- README.md: " heading; next }
     /^```/ { inside = 0 }
     inside' README.md >"$ROOT/examples.sql"
{
    echo '\set VERBOSITY sqlstate'
    cat pg_test/readme/setup.sql "$ROOT/examples.sql"
} | psql "host=$host user=postgres dbname=$DATABASE" -X -a -v ON_ERROR_STOP=0 2>&1 |
    sed -E 's/\b[0-9]{12,}\b/TOKEN/g; s/\bPID [0-9]+/PID PID/g;
            s/[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+[+-][0-9]{2}/TIME/g;
            s/-{2,}/--/g; s/ {2,}/ /g; s/ +$//' >"$ROOT/examples.out"
if diff -u pg_test/readme/expected.out "$ROOT/examples.out" >"$ROOT/examples.diff"; then
    echo "readme examples: ok"
    echo "readme: 1 passed, 0 failed"
else
    cat "$ROOT/examples.diff"
    echo "readme examples: FAILED (diff above; $ROOT/examples.out is what psql printed)"
    echo "readme: 0 passed, 1 failed"
    exit 1
fi
