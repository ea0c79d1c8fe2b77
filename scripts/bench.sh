#!/usr/bin/env bash
# Side-by-side pgbench runs on one server: every workload runs in each round, in rotating
# order (backwards every other round), with the same clients; the median tps over the rounds
# is compared with the floor (an empty transaction) and with the raw SQL a user would
# otherwise write. Absolute tps on a shared machine mean little; the ratios are the result.
#   BENCH_SECONDS (default 5) per workload and round, BENCH_ROUNDS (default 5),
#   BENCH_CLIENTS (default 8), BENCH_THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-5}
CLIENTS=${BENCH_CLIENTS:-8}
THREADS=${BENCH_THREADS:-2}
DIR=$PWD/build/pg/bench
# A second server draws every token from the sequence (fenced_lock.token_block = 1, a
# postmaster setting): the per-call path, beside the shared allocator of the first.
PER_CALL_DIR=$PWD/build/pg/bench-per-call
# The servers listen on their own Unix sockets only: no port to collide with.
HOST=$(scripts/pg.sh socket "$DIR")
URL="host=$HOST user=postgres dbname=fenced_lock_bench"
PER_CALL_URL="host=$(scripts/pg.sh socket "$PER_CALL_DIR") user=postgres dbname=fenced_lock_bench"
# name=script[:connection options][@per_call]; a name ending in _1 runs with one client.
WORKLOADS=(floor=floor raw_two_statements=raw_two_statements raw_one_statement=raw_one_statement
    bare_lock=bare_lock acquire_random=acquire_random
    acquire_random_per_call=acquire_random@per_call
    acquire_random_nondurable=acquire_random:"-c fenced_lock.durable_tokens=off"@per_call
    acquire_random_untracked=acquire_random:"-c fenced_lock.track=off"
    bare_hot=bare_hot acquire_hot=acquire_hot raw_hot=raw_hot acquire_hot_per_call=acquire_hot@per_call
    floor_1=floor bare_lock_1=bare_lock acquire_random_1=acquire_random
    raw_write=raw_write acquire_write=acquire_write
    acquire_write_nondurable=acquire_write:"-c fenced_lock.durable_tokens=off"
    update_raw=update_raw update_fenced=update_fenced update_plpgsql=update_plpgsql
    lease_cycle=lease_cycle raw_lease_cycle=raw_lease_cycle
    lease_cycle_unflushed=lease_cycle:"-c synchronous_commit=off"
    raw_lease_cycle_unflushed=raw_lease_cycle:"-c synchronous_commit=off"
    claim_fenced=claim_fenced claim_raw=claim_raw
    permit_hot=permit_hot raw_permit_hot=raw_permit_hot)

trap 'scripts/pg.sh stop "$DIR"; scripts/pg.sh stop "$PER_CALL_DIR"' EXIT
scripts/pg.sh stop "$DIR"
scripts/pg.sh stop "$PER_CALL_DIR"
rm -rf "$DIR" "$PER_CALL_DIR"
# Preloaded, as a server that wants the fenced_locks view runs; room for 10,000 held locks.
scripts/pg.sh start "$DIR" -c max_connections=50 -c max_locks_per_transaction=2500 \
    -c shared_preload_libraries=fenced_lock -c fenced_lock.max_grants=120000
scripts/pg.sh start "$PER_CALL_DIR" -c max_connections=50 \
    -c shared_preload_libraries=fenced_lock -c fenced_lock.token_block=1
for url in "$URL" "$PER_CALL_URL"; do
    psql "${url/fenced_lock_bench/postgres}" -qX -c "CREATE DATABASE fenced_lock_bench"
    psql "$url" -qX -c "CREATE EXTENSION fenced_lock" -c "SELECT register_namespace('bench', 2001)"
done
# Each UPDATE workload gets a table of its own (raw_write too: acquire_fenced's tokens, which
# start at the clock, would raise bench_rows' fences above bench_token_seq's, and raw_write's
# every UPDATE would then be refused, and cheap). Not bench_rows: the lock workloads raise its
# fences far above the update workloads' token (1000), and a refused write costs fenced_update
# a second statement (it tells "superseded" from "no such row"); here every call writes. Not
# one shared table either: each run would prune the dead rows the run before it left.
psql "$URL" -qX \
    -c "CREATE SEQUENCE bench_token_seq AS bigint CACHE 1 NO CYCLE" \
    -c "CREATE TABLE bench_rows (id int PRIMARY KEY, payload text, fence bigint NOT NULL)" \
    -c "CREATE TABLE bench_leases (id int PRIMARY KEY, owner text, expires_at timestamptz)" \
    -c "INSERT INTO bench_rows SELECT g, NULL, 0 FROM generate_series(1, 100000) g" \
    -c "CREATE TABLE bench_writes_raw (LIKE bench_rows INCLUDING ALL)" \
    -c "INSERT INTO bench_writes_raw SELECT * FROM bench_rows" \
    -c "CREATE TABLE bench_updates_raw (LIKE bench_rows INCLUDING ALL)" \
    -c "INSERT INTO bench_updates_raw SELECT * FROM bench_rows" \
    -c "CREATE TABLE bench_updates_fenced (LIKE bench_rows INCLUDING ALL)" \
    -c "INSERT INTO bench_updates_fenced SELECT * FROM bench_rows" \
    -c "CREATE TABLE bench_updates_plpgsql (LIKE bench_rows INCLUDING ALL)" \
    -c "INSERT INTO bench_updates_plpgsql SELECT * FROM bench_rows" \
    -c "CREATE FUNCTION bench_update_plpgsql(p_id int, p_token bigint, p_payload text)
        RETURNS boolean LANGUAGE plpgsql AS \$\$ BEGIN
            UPDATE bench_updates_plpgsql SET payload = p_payload, fence = p_token
             WHERE id = p_id AND (fence <= p_token OR fence IS NULL);
            RETURN FOUND; END \$\$" \
    -c "CREATE TABLE bench_jobs_fenced (id int PRIMARY KEY, state text NOT NULL DEFAULT 'pending',
                                         lease_until timestamptz, fence bigint NOT NULL DEFAULT 0)" \
    -c "INSERT INTO bench_jobs_fenced (id) SELECT g FROM generate_series(1, 10000) g" \
    -c "CREATE TABLE bench_jobs_raw (LIKE bench_jobs_fenced INCLUDING ALL)" \
    -c "INSERT INTO bench_jobs_raw SELECT * FROM bench_jobs_fenced" \
    -c "VACUUM ANALYZE"

declare -A results
for ((round = 0; round < ROUNDS; round++)); do
    for ((i = 0; i < ${#WORKLOADS[@]}; i++)); do
        # Odd rounds go backwards: neighbours (update_raw, update_fenced, ...) swap places.
        position=$(((round % 2 ? ${#WORKLOADS[@]} - 1 - i : i) + round))
        entry=${WORKLOADS[position % ${#WORKLOADS[@]}]}
        workload=${entry%%=*} script=${entry#*=} options= url=$URL clients=$CLIENTS threads=$THREADS
        [[ $script == *@per_call ]] && url=$PER_CALL_URL script=${script%@per_call}
        [[ $script == *:* ]] && options=${script#*:} script=${script%%:*}
        [[ $workload == *_1 ]] && clients=1 threads=1
        # A client's error fails the run (pgbench exits non-zero), loudly: an error under load
        # is a bug to see, not a round to skip.
        if ! output=$(PGOPTIONS=$options /usr/lib/postgresql/15/bin/pgbench -n -M prepared \
            -c "$clients" -j "$threads" -T "$SECONDS_EACH" -f "bench/$script.sql" "$url" 2>&1); then
            echo "bench: pgbench failed for $workload:" >&2
            grep -i "error\|abort" <<<"$output" | head -5 >&2
            exit 1
        fi
        tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$output")
        [ -n "$tps" ] || { echo "bench: pgbench printed no tps for $workload" >&2; exit 1; }
        results[$workload]+="$tps "
        echo "round $((round + 1))/$ROUNDS  $workload: $tps tps"
    done
done

median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
floor=$(median "${results[floor]}")
raw=$(median "${results[raw_one_statement]}")
echo
echo "pgbench -M prepared -c $CLIENTS -j $THREADS, ${SECONDS_EACH}s x $ROUNDS rounds; median tps"
printf '%-22s %12s %10s %14s\n' workload tps vs_floor vs_raw_1_stmt
for entry in "${WORKLOADS[@]}"; do
    workload=${entry%%=*}
    tps=$(median "${results[$workload]}")
    awk -v w="$workload" -v t="$tps" -v f="$floor" -v r="$raw" \
        'BEGIN { printf "%-22s %12.0f %9.2fx %13.2fx\n", w, t, t / f, t / r }'
done
echo
durable=$(median "${results[acquire_random]}")
per_call=$(median "${results[acquire_random_per_call]}")
nondurable=$(median "${results[acquire_random_nondurable]}")
awk -v d="$durable" -v p="$per_call" -v n="$nondurable" -v r="$raw" -v f="$floor" \
    'BEGIN { printf "durable tokens, shared allocator: %.2fx raw 1-stmt, %.2fx floor; %.2fx per-call durable; %.2fx per-call durable_tokens=off\n", d / r, d / f, d / p, d / n }'
hot=$(median "${results[acquire_hot]}")
raw_hot=$(median "${results[raw_hot]}")
hot_per_call=$(median "${results[acquire_hot_per_call]}")
awk -v h="$hot" -v r="$raw_hot" -v p="$hot_per_call" \
    'BEGIN { printf "hot key: shared allocator %.2fx raw hot key; per call %.2fx\n", h / r, p / r }'
single=$(median "${results[acquire_random_1]}")
single_floor=$(median "${results[floor_1]}")
awk -v s="$single" -v f="$single_floor" \
    'BEGIN { printf "one client: acquire_fenced %.2fx the floor\n", s / f }'
durable=$(median "${results[acquire_write]}")
nondurable=$(median "${results[acquire_write_nondurable]}")
raw=$(median "${results[raw_write]}")
awk -v d="$durable" -v n="$nondurable" -v r="$raw" \
    'BEGIN { printf "durable tokens on vs off, lock + guarded UPDATE: %.2fx (vs raw SQL: %.2fx)\n", d / n, d / r }'
# The median over the rounds of A's tps / B's tps in the same round (A and B ran one after
# the other), with the lowest and the highest: steadier than a ratio of medians when the
# machine's speed drifts between rounds.
paired() {
    paste -d' ' <(tr ' ' '\n' <<<"${results[$1]}" | grep .) <(tr ' ' '\n' <<<"${results[$2]}" | grep .) |
        awk '{ print $1 / $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { printf "%.2fx (rounds %.2fx to %.2fx)", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
echo "acquire_fenced vs the bare advisory lock (pg_advisory_xact_lock, no token), per round:"
echo "    random keys $(paired acquire_random bare_lock); hot key $(paired acquire_hot bare_hot);"
echo "    one client $(paired acquire_random_1 bare_lock_1)"
echo "lease cycle vs the hand-written TTL row (no token), per round: $(paired lease_cycle raw_lease_cycle)"
echo "    both with synchronous_commit = off: $(paired lease_cycle_unflushed raw_lease_cycle_unflushed);"
echo "    the lease cycle with synchronous_commit = off vs on: $(paired lease_cycle_unflushed lease_cycle)"
echo "acquire_fenced counted (fenced_lock.track, the default) vs not, random keys, per round: $(paired acquire_random acquire_random_untracked)"
echo "fenced_update vs hand-written conditional UPDATE (random keys), per round: $(paired update_fenced update_raw);"
echo "    the same UPDATE in a PL/pgSQL function (no checks) vs the UPDATE: $(paired update_plpgsql update_raw)"
echo "fenced semaphore, 4 permits on one hot key (acquire_permit) vs 4 advisory locks tried in turn + nextval, per round: $(paired permit_hot raw_permit_hot)"
echo "queue claim (claim 10 with SKIP LOCKED, complete each) with new_fencing_token() vs with fence + 1, per round: $(paired claim_fenced claim_raw)"
lease=$(median "${results[lease_cycle]}")
raw=$(median "${results[raw_lease_cycle]}")
acquire=$(median "${results[acquire_random]}")
awk -v l="$lease" -v r="$raw" -v a="$acquire" \
    'BEGIN { printf "try_acquire_lease + release_lease vs a raw SQL TTL lock (Redis style, no token): %.2fx; vs acquire_fenced: %.2fx\n", l / r, l / a }'
# Backend CPU per call, one client: the same calls, counted by the kernel rather than timed.
# A backend's CPU time is added to the postmaster's children's time when it exits, so each
# pgbench run (its own backend) is measured whole; the runs alternate, and the median per
# workload is printed. Steadier than tps on a shared machine (other processes' load does not
# count), and it shows where a gap in tps comes from. Autovacuum is off meanwhile, and each
# run starts from a VACUUM: an autovacuum worker's CPU time would otherwise count for the run
# in which it exits.
CPU_CALLS=${BENCH_CPU_CALLS:-20000}
psql "$URL" -qXAt -c "ALTER SYSTEM SET autovacuum = off" -c "SELECT pg_reload_conf()" >/dev/null
postmaster=$(head -1 "$DIR/data/postmaster.pid")
children_cpu_ticks() { awk '{ print $16 + $17 }' "/proc/$postmaster/stat"; }
CPU_WORKLOADS=(floor bare_lock acquire_random raw_lease_cycle lease_cycle update_raw update_fenced
    update_plpgsql)
declare -A cpu
for ((round = 0; round < ROUNDS; round++)); do
    for workload in "${CPU_WORKLOADS[@]}"; do
        psql "$URL" -qX -c "VACUUM"
        sleep 0.2 # the postmaster reaps psql's backend
        before=$(children_cpu_ticks)
        /usr/lib/postgresql/15/bin/pgbench -n -M prepared -c 1 -t "$CPU_CALLS" \
            -f "bench/$workload.sql" "$URL" >/dev/null 2>&1
        sleep 0.2 # the postmaster reaps the backend
        cpu[$workload]+="$((($(children_cpu_ticks) - before) * 1000000 / $(getconf CLK_TCK) / CPU_CALLS)) "
    done
done
psql "$URL" -qXAt -c "ALTER SYSTEM RESET autovacuum" -c "SELECT pg_reload_conf()" >/dev/null
echo
echo "backend CPU per call (one client, $CPU_CALLS calls x $ROUNDS runs; median, microseconds)"
for workload in "${CPU_WORKLOADS[@]}"; do
    printf '  %-16s %6s us\n' "$workload" "$(median "${cpu[$workload]}")"
done

echo
echo "Goals: acquire_fenced >= 0.95x the bare lock (random keys and hot key), >= 0.97x with one"
echo "       client; lease cycle >= 1.0x the hand-written TTL row; fenced_update >= 0.90x the"
echo "       hand-written UPDATE and >= the PL/pgSQL function; counting >= 0.99x not counting;"
echo "       a fenced permit >= 1.0x the permit by hand."

# fenced_locks with 10,000 and 100,000 held locks: each read an operator would run, and the
# latency of acquire+commit while 8 sessions read the view in a loop.
pgbench_latency() { # SCRIPT_FILE CLIENTS SECONDS -> average latency in ms
    /usr/lib/postgresql/15/bin/pgbench -n -c "$2" -j "$THREADS" -T "$3" -f "$1" "$URL" 2>/dev/null |
        sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p'
}
query_file=$(mktemp)
trap 'scripts/pg.sh stop "$DIR"; scripts/pg.sh stop "$PER_CALL_DIR"; rm -f "$query_file"' EXIT
for locks in 10000 100000; do
    psql "$URL" -qXAt -c "SELECT count(acquire_fenced_session(2001, g)) FROM generate_series(1, $locks) g" \
        -c "SELECT pg_sleep(86400)" >/dev/null 2>&1 &
    holder=$!
    until [ "$(psql "$URL" -qXAt -c "SELECT count(*) FROM fenced_lock_internal.fenced_lock_grants()")" = "$locks" ]; do
        sleep 0.2
    done
    holder_pid=$(psql "$URL" -qXAt -c "SELECT pid FROM fenced_lock_internal.fenced_lock_grants() LIMIT 1")
    echo
    echo "fenced_locks with $locks held locks (pgbench, 1 client, 3 s each; average per read)"
    for query in "SELECT count(*) FROM fenced_locks" \
        "SELECT count(*) FROM fenced_locks WHERE ns = 2001" \
        "SELECT count(*) FROM fenced_locks WHERE ns = 2001 AND id = 42" \
        "SELECT count(*) FROM fenced_locks WHERE pid = $holder_pid" \
        "SELECT count(*) FROM fenced_locks WHERE NOT granted" \
        "SELECT count(*) FROM fenced_locks WHERE namespace = 'bench'" \
        "SELECT * FROM fenced_locks ORDER BY acquired_at LIMIT 10" \
        "SELECT * FROM fenced_locks" \
        "SELECT * FROM fenced_locks WHERE granted AND ns = 2001 AND id = 42"; do
        echo "$query;" >"$query_file"
        printf '  %8.1f ms  %s\n' "$(pgbench_latency "$query_file" 1 3)" "$query"
    done
    echo "SELECT count(*) FROM fenced_locks;" >"$query_file"
    /usr/lib/postgresql/15/bin/pgbench -n -c 8 -j "$THREADS" -T 6 -f "$query_file" "$URL" \
        >/dev/null 2>&1 &
    readers=$!
    sleep 1
    printf '  %8.1f ms  acquire+commit (random keys) while 8 sessions read the view\n' \
        "$(pgbench_latency bench/acquire_random.sql 1 3)"
    wait "$readers"
    kill "$holder"
    wait "$holder" 2>/dev/null || true  # it ends by the kill
    psql "$URL" -qXAt -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                           WHERE query LIKE '%pg_sleep(86400)%' AND pid <> pg_backend_pid()" >/dev/null
done
