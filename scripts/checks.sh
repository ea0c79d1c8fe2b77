# Sourced by the shell test scripts once they set SUITE (the name in their summary line) and
# OUT (their output directory, made anew here). `check NAME ACTUAL EXPECTED` counts one check,
# printing the failed ones; `finish` prints "SUITE: N passed, M failed" and fails if any did.
rm -rf "$OUT" && mkdir -p "$OUT"
VERSION=$(scripts/version.sh)
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
