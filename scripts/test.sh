#!/usr/bin/env bash
# `make test`: every suite in turn (each runs even when an earlier one failed), then one
# summary line per suite and a final "N passed, M failed" line. When any suite failed, the
# lines that say what failed follow, and it exits non-zero. Each suite's full output is kept
# in build/test-logs/.
set -uo pipefail
cd "$(dirname "$0")/.."

LOGS=build/test-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
summaries=()
# How long each run below took, for the summary's last section.
timings=()
total_passed=0 total_failed=0

# Adds one summary line, with the suite's wall time in seconds ($5); a suite that failed
# without any counted failure counts as one.
record() {
    local name=$1 passed=$2 failed=$3 status=$4 seconds=$5
    if ((status != 0 && failed == 0)); then
        failed=1
    fi
    summaries+=("$name: $passed passed, $failed failed ($(minutes "$seconds"))")
    total_passed=$((total_passed + passed)) total_failed=$((total_failed + failed))
}

# Sums cargo test's "test result: ... N passed; M failed" lines.
cargo_counts() {
    awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i;
         if ($(i+1) ~ /^failed/) f += $i } } END { print p + 0, f + 0 }' "$1"
}

. scripts/suite-line.sh

# Runs command $2... as run $1, its output kept in $LOGS/$1.log. Each suite line it prints is
# also written to $LOGS/$1.times with the seconds since the run started: a suite's wall time
# is the time since the previous suite line of the same run (the suites of a run follow each
# other), so the first one's includes the run's set-up (a build, a server start). Debian's
# mawk, interactive: it reads each line as it comes, not a block at a time.
run() {
    local name=$1 started=$SECONDS status
    shift
    echo "== $name: $*"
    "$@" 2>&1 | mawk -W interactive -v times="$LOGS/$name.times" -v start="$(date +%s)" -v suite="$SUITE_LINE" \
        '{ print; fflush() } $0 ~ suite { print systime() - start "\t" $0 >times; fflush(times) }' |
        tee "$LOGS/$name.log"
    status=${PIPESTATUS[0]}
    run_seconds=$((SECONDS - started))
    timings+=("$name: $(minutes "$run_seconds")")
    return "$status"
}

# Starts run $1 (the rest as for run) in the background, its output kept in its log only;
# finish_background $1 waits for it, prints its log and returns its status.
declare -A background_pids
background() {
    local name=$1
    shift
    echo "== $name (in the background until finish_background): $*"
    (
        run "$name" "$@" >/dev/null
        echo "$? $run_seconds" >"$LOGS/$name.ended"
    ) &
    background_pids[$name]=$!
}

finish_background() {
    local name=$1 status
    wait "${background_pids[$name]}"
    echo "== $name (ran in the background): its output"
    cat "$LOGS/$name.log"
    read -r status run_seconds <"$LOGS/$name.ended"
    timings+=("$name: $(minutes "$run_seconds") (in the background)")
    return "$status"
}

# "N s" below two minutes, "M min S s" above.
minutes() {
    if (($1 < 120)); then echo "$1 s"; else echo "$(($1 / 60)) min $(($1 % 60)) s"; fi
}

PG=${PG:-15}
run setup make -s setup || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

# Another program holds the ports 0.1.0's test servers used, for the whole run.
python3 scripts/hold-ports.py 54300 54350 &
holder=$!
trap 'kill $holder 2>/dev/null' EXIT

# Records every suite line run $1 printed, with its wall time; a run that failed (status $2)
# without a failed suite (a build or a server that did not start) counts as a failure of $3.
record_lines() {
    local times=$LOGS/$1.times status=$2 fallback=$3 at previous=0 line name counts passed failed
    touch "$times"
    while IFS=$'\t' read -r at line; do
        name=${line%%: *} counts=${line#*: }
        passed=${counts%% passed*} failed=${counts#*passed, }
        record "$name" "$passed" "${failed% failed}" 0 $((at - previous))
        previous=$at
    done <"$times"
    if ((status != 0)) && ! grep -qE ': [0-9]+ passed, [1-9][0-9]* failed$' "$times"; then
        record "$fallback" 0 1 1 "$run_seconds"
    fi
}

# The SQL suites of one major: sql-tests.sh prints a "<suite>: N passed, M failed" line per
# suite it ran.
sql_suites() {
    run "sql-tests-pg$1" make -s sql-tests PG="$1"
    record_lines "sql-tests-pg$1" $? "sql-tests (pg$1)"
}

if [ "$PG" = 15 ]; then
    run lint make -s lint
    status=$?
    lint_commands=$(make -s -n lint | grep -c '^cargo')
    if ((status == 0)); then record lint "$lint_commands" 0 0 "$run_seconds"
    else record lint 0 1 1 "$run_seconds"; fi

    run unit make -s unit
    status=$?
    read -r passed failed < <(cargo_counts "$LOGS/unit.log")
    record unit "$passed" "$failed" "$status" "$run_seconds"

    run checker make -s checker
    status=$?
    read -r passed failed < <(cargo_counts "$LOGS/checker.log")
    record checker "$passed" "$failed" "$status" "$run_seconds"

    sql_suites 15

    run faults make -s faults
    status=$?
    read -r passed failed < <(cargo_counts "$LOGS/faults.log")
    record faults "$passed" "$failed" "$status" "$run_seconds"

    # The runs that mostly compile start now, at the lowest CPU and I/O priority, and take
    # what the processors have left while the client libraries and the HA and comparison short
    # forms below (nice 0) wait on their servers (not beside the fault suite, whose kill and
    # failover storms are CPU-bound): PostgreSQL 18's release build and SQL suites; the check
    # that pgrx's state is each checkout's own, whose second clone builds for PostgreSQL 16
    # and runs its SQL suites (their summary lines passed on: 16's suites run there only);
    # and PostgreSQL 16's release library here, which `make package` below then finds built.
    # Each has its own target directory, servers and sockets; setup ran above (-o setup).
    background pgrx-home nice -n 19 ionice -c 3 scripts/pgrx-home-test.sh
    background sql-tests-pg18 nice -n 19 ionice -c 3 make -s -o setup sql-tests PG=18
    background build-pg16 nice -n 19 ionice -c 3 make -s -o setup all PG=16

    # The client libraries, installed from their packages (clients/).
    run clients make -s clients
    record_lines clients $? clients

    # Patroni + etcd and pg_auto_failover (ha/): the short form (both modes, the lagging
    # replica, the frozen Patroni, a control, pg_auto_failover's lagging secondary), beside
    # Redis, Redlock, etcd, PostgreSQL by hand and fenced_lock through the same faults
    # (compare/): one trial per cell. Both spend most of their time waiting on their
    # servers' timers, and each keeps to ports, network namespaces and directories of its
    # own; the library both load was installed by the runs above (-o install: not again,
    # which would rewrite the staged files under the other).
    background ha make -s -o install ha QUICK=1
    run compare make -s -o install compare QUICK=1
    record_lines compare $? compare
    finish_background ha
    record_lines ha $? ha
    finish_background pgrx-home
    record_lines pgrx-home $? "pgrx home"
    finish_background sql-tests-pg18
    record_lines sql-tests-pg18 $? "sql-tests (pg18)"
    finish_background build-pg16
    record_lines build-pg16 $? "build (pg16)"

    # Installing as users do: `make install PG_CONFIG=...`, the Debian packages (built, then
    # installed with dpkg and tested), and PGXN's META.json and archive.
    run install scripts/install-test.sh
    record_lines install $? install
    run package bash -c "make -s package && scripts/package-test.sh"
    record_lines package $? package
    run dist scripts/dist-test.sh
    record_lines dist $? dist
else
    sql_suites "$PG"
fi

echo
echo "== time per run"
printf '%s\n' "${timings[@]}"
echo "whole run: $(minutes "$SECONDS")"
echo
echo "== summary (wall time per suite)"
printf '%s\n' "${summaries[@]}"
echo "$total_passed passed, $total_failed failed"
# When something failed, the lines that say what (a check's expected and actual value, a
# failed test of pg_regress, cargo or go, a FAIL or FAILED line of the other suites, a panic)
# come last, where a CI page that shows the end of the output shows them.
if ((total_failed > 0)); then
    echo
    echo "== what failed (the first 40 lines that say so; each run's output is in $LOGS/)"
    grep -E ": expected '.*', got '|^not ok [0-9]|FAIL|panicked at" "$LOGS"/*.log |
        grep -vE ': [0-9]+ passed, [0-9]+ failed' | head -40
fi
((total_failed == 0))
