#!/usr/bin/env bash
# Side-by-side pgbench runs on one server: every workload runs in each round, in rotating
# order, with the same clients; the median tps over the rounds is compared with the floor
# (an empty transaction) and with the raw SQL a user would otherwise write. Absolute tps on
# a shared machine mean little; the ratios are the result.
#   BENCH_SECONDS (default 5) per workload and round, BENCH_ROUNDS (default 3),
#   BENCH_CLIENTS (default 8), BENCH_THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
CLIENTS=${BENCH_CLIENTS:-8}
THREADS=${BENCH_THREADS:-2}
DIR=$PWD/build/pg/bench
# The server listens on its own Unix socket only: no port to collide with.
HOST=$(scripts/pg.sh socket "$DIR")
URL="host=$HOST user=postgres dbname=fenced_lock_bench"
# name=script[:connection options]
WORKLOADS=(floor=floor raw_two_statements=raw_two_statements raw_one_statement=raw_one_statement
    acquire_random=acquire_random
    acquire_random_nondurable=acquire_random:"-c fenced_lock.durable_tokens=off"
    acquire_hot=acquire_hot
    raw_write=raw_write acquire_write=acquire_write
    acquire_write_nondurable=acquire_write:"-c fenced_lock.durable_tokens=off"
    update_raw=update_raw update_fenced=update_fenced view_10k=view_10k)

trap 'scripts/pg.sh stop "$DIR"' EXIT
scripts/pg.sh stop "$DIR"
rm -rf "$DIR"
# Preloaded, as a server that wants the fenced_locks view runs; room for 10,000 held locks.
scripts/pg.sh start "$DIR" -c max_connections=50 -c max_locks_per_transaction=256 \
    -c shared_preload_libraries=fenced_lock
psql "host=$HOST user=postgres dbname=postgres" -qX -c "CREATE DATABASE fenced_lock_bench"
psql "$URL" -qX -c "CREATE EXTENSION fenced_lock" \
    -c "CREATE SEQUENCE bench_token_seq AS bigint CACHE 1 NO CYCLE" \
    -c "CREATE TABLE bench_rows (id int PRIMARY KEY, payload text, fence bigint NOT NULL)" \
    -c "INSERT INTO bench_rows SELECT g, NULL, 0 FROM generate_series(1, 100000) g" \
    -c "VACUUM ANALYZE"

# One session holds 10,000 fenced session locks throughout, for the view_10k workload.
psql "$URL" -qXAt -c "SELECT count(acquire_fenced_session(2001, g)) FROM generate_series(1, 10000) g" \
    -c "SELECT pg_sleep(86400)" >/dev/null 2>&1 &
until [ "$(psql "$URL" -qXAt -c "SELECT count(*) FROM fenced_lock_grants()")" = 10000 ]; do
    sleep 0.2
done

declare -A results
for ((round = 0; round < ROUNDS; round++)); do
    for ((i = 0; i < ${#WORKLOADS[@]}; i++)); do
        entry=${WORKLOADS[(i + round) % ${#WORKLOADS[@]}]}
        workload=${entry%%=*} script=${entry#*=} options=
        [[ $script == *:* ]] && options=${script#*:} script=${script%%:*}
        tps=$(PGOPTIONS=$options /usr/lib/postgresql/15/bin/pgbench -n -M prepared \
            -c "$CLIENTS" -j "$THREADS" -T "$SECONDS_EACH" -f "bench/$script.sql" "$URL" 2>/dev/null |
            sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
        [ -n "$tps" ] || { echo "bench: pgbench failed for $workload" >&2; exit 1; }
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
nondurable=$(median "${results[acquire_random_nondurable]}")
awk -v d="$durable" -v n="$nondurable" \
    'BEGIN { printf "durable tokens on vs off, lock only (random keys): %.2fx\n", d / n }'
durable=$(median "${results[acquire_write]}")
nondurable=$(median "${results[acquire_write_nondurable]}")
raw=$(median "${results[raw_write]}")
awk -v d="$durable" -v n="$nondurable" -v r="$raw" \
    'BEGIN { printf "durable tokens on vs off, lock + guarded UPDATE: %.2fx (vs raw SQL: %.2fx)\n", d / n, d / r }'
fenced=$(median "${results[update_fenced]}")
raw=$(median "${results[update_raw]}")
awk -v f="$fenced" -v r="$raw" \
    'BEGIN { printf "fenced_update vs hand-written conditional UPDATE (random keys): %.2fx\n", f / r }'
view=$(median "${results[view_10k]}")
awk -v t="$view" -v c="$CLIENTS" \
    'BEGIN { printf "SELECT count(*) FROM fenced_locks with 10,000 held locks: %.1f ms per read\n", 1000 * c / t }'
echo "Goals: acquire_random >= 1.00x raw_1_stmt and >= 0.90x floor; durable on >= 0.90x off;"
echo "       fenced_update >= 0.85x the hand-written UPDATE."
