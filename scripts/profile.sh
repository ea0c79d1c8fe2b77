#!/usr/bin/env bash
# Instructions per transaction of bench/ workloads, counted by callgrind in the backend that
# runs them (pgbench -M prepared, one client): repeatable to a few instructions on any machine,
# busy or not, where tps and CPU time are not. Each workload runs twice, with FEW and MANY
# transactions, and the difference is divided by MANY - FEW, so the connection's start and
# the first calls' caches fall out. The server runs under valgrind (every process it forks
# is counted in a file of its own), preloaded, on a socket of its own in build/profile; the
# callgrind files stay there, for callgrind_annotate.
#   scripts/profile.sh [WORKLOAD ...]   (default: floor bare_lock acquire_random
#                                        acquire_random_untracked raw_lease_cycle lease_cycle)
# A workload is a bench/ script, or NAME=SCRIPT:OPTIONS to run SCRIPT with PGOPTIONS=OPTIONS.
# PROFILE_HELD=N: N session locks (namespace 2001, ids 1 to N) held by another session while
# the workloads run, as in the curves' held-locks points (then FEW and MANY 2 and 6 suit
# view_one_key and pg_locks_one_key at 100,000).
set -euo pipefail
cd "$(dirname "$0")/.."

FEW=${PROFILE_FEW:-500}
MANY=${PROFILE_MANY:-1500}
HELD=${PROFILE_HELD:-0}
WORKLOADS=("$@")
((${#WORKLOADS[@]})) || WORKLOADS=(floor bare_lock acquire_random
    acquire_random_untracked="acquire_random:-c fenced_lock.track=off" raw_lease_cycle lease_cycle)
BIN=/usr/lib/postgresql/15/bin
DIR=$PWD/build/profile
command -v valgrind >/dev/null || { echo "profile: needs valgrind (apt-get install valgrind)" >&2; exit 2; }

stop() { runuser -u postgres -- "$BIN/pg_ctl" -D "$DIR/data" stop -m fast >/dev/null 2>&1 || true; }
trap stop EXIT
stop
rm -rf "$DIR"
mkdir -p "$DIR/out"
chown -R postgres:postgres "$DIR"
runuser -u postgres -- "$BIN/initdb" -D "$DIR/data" -A trust >/dev/null
# Room for the held locks: the lock table has max_locks_per_transaction entries a backend
# (about 120 backends and workers at the defaults); the grants table one a grant.
room=
((HELD > 0)) && room="-c max_locks_per_transaction=$((64 + HELD / 90)) -c fenced_lock.max_grants=$((16384 + HELD))"
runuser -u postgres -- bash -c "cd '$DIR' && exec valgrind --tool=callgrind --trace-children=yes \
    --callgrind-out-file='$DIR/out/callgrind.%p' '$BIN/postgres' -D '$DIR/data' \
    -c listen_addresses= -c unix_socket_directories='$DIR' \
    -c shared_preload_libraries=fenced_lock -c autovacuum=off $room >'$DIR/server.log' 2>&1 &"
URL="host=$DIR user=postgres dbname=postgres"
for _ in $(seq 120); do psql "$URL" -qAtX -c "SELECT 1" >/dev/null 2>&1 && break; sleep 1; done
psql "$URL" -qX -c "CREATE EXTENSION fenced_lock" -c "SELECT register_namespace('bench', 2001)" \
    -c "CREATE TABLE bench_leases (id int PRIMARY KEY, owner text, expires_at timestamptz)" \
    >/dev/null
if ((HELD > 0)); then
    # Held until the server stops; the holder's file is written then, after every workload's.
    psql "$URL" -qAtX -c "SELECT count(acquire_fenced_session(2001, g)) FROM generate_series(1, $HELD) g" \
        -c "SELECT pg_sleep(86400)" >/dev/null 2>&1 &
    for _ in $(seq 600); do
        held=$(psql "$URL" -qAtX -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        ((held >= HELD)) && break
        sleep 2
    done
    ((held >= HELD)) || { echo "profile: $held of $HELD session locks held after 20 minutes" >&2; exit 1; }
fi
# The set-up connection's backend writes its file as it exits: not a workload's.
sleep 3
for file in "$DIR"/out/*; do
    [ -e "$file" ] || continue
    for _ in $(seq 30); do grep -q '^totals:' "$file" && break; sleep 1; done
    rm -f "$file"
done

# The instructions of the backend that ran N transactions of WORKLOAD: the largest of the
# files written since (a backend writes its file when it exits).
instructions() {
    local workload=${1%%=*} script=${1#*=} n=$2 before file largest=0 total options=
    [[ $script == *:* ]] && options=${script#*:} script=${script%%:*}
    before=$(ls "$DIR/out")
    PGOPTIONS=$options "$BIN/pgbench" -n -M prepared -c 1 -t "$n" -f "bench/$script.sql" "$URL" >/dev/null
    sleep 3
    for file in $(comm -13 <(sort <<<"$before") <(ls "$DIR/out" | sort)); do
        for _ in $(seq 30); do grep -q '^totals:' "$DIR/out/$file" && break; sleep 1; done
        total=$(awk '/^totals:/ { print $2 }' "$DIR/out/$file")
        if ((total > largest)); then
            largest=$total
            mv "$DIR/out/$file" "$DIR/$workload.$n.callgrind"
        fi
    done
    echo "$largest"
}

printf '%-26s %14s\n' workload "instructions per transaction (callgrind, $((MANY - FEW)) transactions, $HELD locks held)"
declare -A per_transaction
for workload in "${WORKLOADS[@]}"; do
    few=$(instructions "$workload" "$FEW")
    many=$(instructions "$workload" "$MANY")
    per_transaction[${workload%%=*}]=$(((many - few) / (MANY - FEW)))
    printf '%-26s %14d\n' "${workload%%=*}" "${per_transaction[${workload%%=*}]}"
done
if [ -n "${per_transaction[acquire_random]:-}" ] && [ -n "${per_transaction[acquire_random_untracked]:-}" ]; then
    awk -v on="${per_transaction[acquire_random]}" -v off="${per_transaction[acquire_random_untracked]}" \
        'BEGIN { printf "counting (fenced_lock.track) costs acquire_fenced %d instructions per transaction: %.2f%% (goal: at most 1%%)\n", on - off, (on - off) * 100 / off }'
fi
echo "callgrind files: $DIR/WORKLOAD.$MANY.callgrind (callgrind_annotate --inclusive=yes)"
