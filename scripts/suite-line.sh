# Sourced by scripts/test.sh and the runs whose output it reads: a suite's summary line,
# "<suite>: N passed, M failed" (checks.sh's finish, sql-tests.sh, the Python and Rust suites).
# test.sh records every line of a run that matches it, with the time it came.
SUITE_LINE='^[a-z][a-z0-9_ ()]*: [0-9]+ passed, [0-9]+ failed$'

# For a run that runs suites of its own (the package test, the pgrx-home check): runs command
# $2... with its output kept in file $1, passing on each suite line as it comes (test.sh times a
# suite by its line); returns the command's status.
pass_suite_lines() {
    local log=$1
    shift
    "$@" 2>&1 | tee "$log" | grep -E --line-buffered "$SUITE_LINE"
    return "${PIPESTATUS[0]}"
}

# Log $1 of such a run without its suite lines, already passed on: a failure's account that
# test.sh does not count a second time.
without_suite_lines() { grep -vE "$SUITE_LINE" "$1"; }
