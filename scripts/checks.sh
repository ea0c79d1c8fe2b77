# Sourced by the shell test scripts: `check NAME ACTUAL EXPECTED` counts one check, printing
# the failed ones; `finish SUITE` prints "SUITE: N passed, M failed" and fails if any did.
passed=0 failed=0
check() {
    if [ "$2" = "$3" ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "$SUITE: $1: expected '$3', got '$2'"
    fi
}
finish() {
    echo "$SUITE: $passed passed, $failed failed"
    ((failed == 0))
}
