# Sourced by scripts/test.sh and the runs whose output it reads: a suite's summary line,
# "<suite>: N passed, M failed" (checks.sh's finish, sql-tests.sh, the Python and Rust suites).
# test.sh records every line of a run that matches it, with the time it came.
SUITE_LINE='^[a-z][a-z0-9_ ()]*: [0-9]+ passed, [0-9]+ failed$'
