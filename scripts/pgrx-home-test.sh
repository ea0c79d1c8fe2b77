#!/usr/bin/env bash
# pgrx's state is each checkout's own: two clones of this repository set up side by side, each
# records its own PostgreSQL 16 and 18 (the wheels under its build/) in its own
# build/pgrx-home, the user's ~/.pgrx is left as it was (absent or not), and after one clone
# is deleted the other still builds and passes its PostgreSQL 16 suites. The clones get a copy
# of this checkout's wheels and tools, to skip downloads and compiles this test is not about.
# Those suites are make test's PostgreSQL 16 suites: their summary lines ("regress (pg16): N
# passed, M failed") are printed as they come. Then "pgrx home: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
SUITE="pgrx home" OUT=$PWD/build/pgrx-home-test
. scripts/checks.sh
. scripts/suite-line.sh
ROOT=$OUT
# The user's own pgrx state, as a list of files and their hashes (empty when there is none).
users_pgrx() { [ -d "$HOME/.pgrx" ] && (cd "$HOME/.pgrx" && find . -type f -exec md5sum {} + | sort); }
before=$(users_pgrx)

for clone in a b; do
    git clone -q "$PWD" "$ROOT/$clone"
    mkdir -p "$ROOT/$clone/build"
    cp -a build/majors build/tools "$ROOT/$clone/build/"
    # As a user runs it: no PGRX_HOME in the environment.
    (cd "$ROOT/$clone" && env -u PGRX_HOME make -s setup) >"$ROOT/setup-$clone.log" 2>&1 ||
        tail -20 "$ROOT/setup-$clone.log"
    check "clone $clone: pgrx records its own PostgreSQL 16" \
        "$(grep -c "^pg16 = \"$ROOT/$clone/build/majors/" "$ROOT/$clone/build/pgrx-home/config.toml")" 1
    check "clone $clone: pgrx records its own PostgreSQL 18" \
        "$(grep -c "^pg18 = \"$ROOT/$clone/build/majors/" "$ROOT/$clone/build/pgrx-home/config.toml")" 1
done
check "the user's ~/.pgrx is as it was" "$(users_pgrx)" "$before"

rm -rf "$ROOT/a"
clone_b_test() { cd "$ROOT/b" && env -u PGRX_HOME make -s test PG=16; }
pass_suite_lines "$ROOT/test-b.log" clone_b_test
status=$?
if ((status == 0)) && tail -1 "$ROOT/test-b.log" | grep -qE '^[1-9][0-9]* passed, 0 failed$'; then
    check "clone b builds and passes its PostgreSQL 16 suites after clone a is gone" ok ok
else
    without_suite_lines "$ROOT/test-b.log" | tail -30
    check "clone b builds and passes its PostgreSQL 16 suites after clone a is gone" failed ok
fi
check "the user's ~/.pgrx is still as it was" "$(users_pgrx)" "$before"
rm -rf "$ROOT/b"
finish
