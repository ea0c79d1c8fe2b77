#!/usr/bin/env bash
# Local PostgreSQL 15 servers for fenced_lock's demo, tests and benchmarks. They run as the
# unprivileged `postgres` user (PostgreSQL refuses root), listen on 127.0.0.1 only, trust
# local connections (test servers, never exposed) and keep everything under one directory.
#
#   pg.sh start   DIR PORT [-c name=value ...]   initdb if needed, then start (no-op if running)
#   pg.sh standby DIR PORT PRIMARY_PORT [-c ...] base backup of the primary, start as hot standby
#   pg.sh stop    DIR                            fast shutdown (no-op if not running)
#   pg.sh crash   DIR                            immediate shutdown: no checkpoint, as a crash
#   pg.sh promote DIR                            promote a standby to primary
set -euo pipefail

BIN=/usr/lib/postgresql/15/bin
# RUST_BACKTRACE would make pgrx append a backtrace to the DETAIL of re-raised errors.
as_postgres() { env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE runuser -u postgres -- "$@"; }

prepare_dir() {
    mkdir -p "$1"
    chown postgres:postgres "$1"
    if ! as_postgres test -w "$1"; then
        echo "pg.sh: user postgres cannot write $1 (a parent directory is not searchable)" >&2
        exit 1
    fi
}

start() {
    local dir=$1 port=$2
    shift 2
    if as_postgres "$BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        return 0
    fi
    as_postgres "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories='' $*" >/dev/null
}

case ${1:-} in
start)
    dir=$(realpath -m "$2")
    prepare_dir "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_postgres "$BIN/initdb" -D "$dir/data" --auth=trust --username=postgres \
            --encoding=UTF8 --locale=C.UTF-8 --no-sync >/dev/null
    fi
    start "$dir" "$3" "${@:4}"
    ;;
standby)
    dir=$(realpath -m "$2")
    prepare_dir "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_postgres "$BIN/pg_basebackup" -h 127.0.0.1 -p "$4" -U postgres -D "$dir/data" \
            --write-recovery-conf --wal-method=stream --checkpoint=fast --no-sync
    fi
    start "$dir" "$3" -c hot_standby=on "${@:5}"
    ;;
stop)
    dir=$(realpath -m "$2")
    if [ -f "$dir/data/PG_VERSION" ] &&
        as_postgres "$BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        as_postgres "$BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    fi
    ;;
crash)
    as_postgres "$BIN/pg_ctl" -D "$(realpath -m "$2")/data" -m immediate -w stop >/dev/null
    ;;
promote)
    as_postgres "$BIN/pg_ctl" -D "$(realpath -m "$2")/data" -w promote >/dev/null
    ;;
*)
    echo "usage: pg.sh start DIR PORT [-c name=value ...] | standby DIR PORT PRIMARY_PORT [-c ...] | stop|crash|promote DIR" >&2
    exit 2
    ;;
esac
