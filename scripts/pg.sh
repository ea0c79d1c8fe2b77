#!/usr/bin/env bash
# Local PostgreSQL servers for fenced_lock's demo, tests and benchmarks. They run as the
# unprivileged `postgres` user (PostgreSQL refuses root), trust local connections (test
# servers, never exposed) and keep everything under one directory.
#
# Test and benchmark servers listen on a Unix-domain socket in a directory of their own and on
# no TCP port at all, so nothing else on the machine (an outgoing connection holding an
# ephemeral port, another suite) can make them fail to start. Only `make run` asks for TCP.
#
#   pg.sh start   DIR [-c name=value ...]          initdb if needed, then start (no-op if running)
#   pg.sh tcp     DIR PORT [-c name=value ...]     the same, also listening on 127.0.0.1:PORT
#   pg.sh standby DIR PRIMARY_DIR [-c ...]         base backup of the primary, start as hot standby
#   pg.sh socket  DIR                              print the socket directory (libpq's host)
#   pg.sh stop    DIR                              fast shutdown (no-op if not running)
#   pg.sh crash   DIR                              immediate shutdown: no checkpoint, as a crash
#   pg.sh promote DIR                              promote a standby to primary
#   pg.sh bouncer DIR SERVER_DIR DATABASE          PgBouncer (transaction mode) in DIR, in
#                                                  front of DATABASE on server SERVER_DIR, on
#                                                  a socket of its own (pg.sh socket DIR)
#   pg.sh bouncer-stop DIR                         stop that PgBouncer (no-op if not running)
#
# PG_BIN selects the PostgreSQL installation (default: Debian's 15).
set -euo pipefail

BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
# Every server listens on its own socket directory, so all can use the standard port number.
SOCKET_PORT=5432
as_postgres() { runuser -u postgres -- "$@"; }

prepare_dir() {
    mkdir -p "$1"
    chown postgres:postgres "$1"
    if ! as_postgres test -w "$1"; then
        echo "pg.sh: user postgres cannot write $1 (a parent directory is not searchable)" >&2
        exit 1
    fi
}

# The socket directory of server DIR: DIR itself, unless the socket's path would pass the
# kernel's limit (107 bytes), then a directory under /tmp named after DIR.
socket_dir() {
    local dir=$1
    if ((${#dir} + ${#SOCKET_PORT} + 10 <= 100)); then
        echo "$dir"
    else
        echo "/tmp/fenced_lock-$(printf '%s' "$dir" | md5sum | cut -c1-16)"
    fi
}

fail_with_log() {
    echo "pg.sh: $1; the last lines of $2:" >&2
    tail -n 25 "$2" 2>/dev/null | sed 's/^/    /' >&2
    exit 1
}

port_taken() {
    echo "pg.sh: port $1 on 127.0.0.1 is already in use by another program." >&2
    echo "       Choose another one, e.g.: make run PORT=$(($1 + 1))" >&2
    exit 1
}

# Binds the port as PostgreSQL will (SO_REUSEADDR), so a taken port is reported plainly
# before initdb and pg_ctl rather than as a line in the server's log.
check_port_free() {
    python3 -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null || port_taken "$1"
}

# start DIR TCP_PORT [-c ...]: TCP_PORT empty for a socket-only server.
start() {
    local dir=$1 tcp_port=$2
    shift 2
    if as_postgres "$BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        return 0
    fi
    local sockets listen=("-c listen_addresses=''" "-c port=$SOCKET_PORT")
    [ -z "$tcp_port" ] || listen=("-c listen_addresses=127.0.0.1" "-c port=$tcp_port")
    sockets=$(socket_dir "$dir")
    prepare_dir "$sockets"
    as_postgres "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "${listen[*]} -c unix_socket_directories='$sockets' $*" >/dev/null && return 0
    # The port was free when checked, but something took it since.
    if [ -n "$tcp_port" ] && tail -n 5 "$dir/server.log" | grep -q 'could not bind'; then
        port_taken "$tcp_port"
    fi
    fail_with_log "the server in $dir did not start" "$dir/server.log"
}

initdb_if_needed() {
    local dir=$1
    prepare_dir "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_postgres "$BIN/initdb" -D "$dir/data" --auth=trust --username=postgres \
            --encoding=UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
            fail_with_log "initdb failed in $dir" "$dir/initdb.log"
    fi
}

case ${1:-} in
start)
    dir=$(realpath -m "$2")
    initdb_if_needed "$dir"
    start "$dir" "" "${@:3}"
    ;;
tcp)
    dir=$(realpath -m "$2") port=$3
    if ! as_postgres "$BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        check_port_free "$port"
    fi
    initdb_if_needed "$dir"
    start "$dir" "$port" "${@:4}"
    ;;
standby)
    dir=$(realpath -m "$2") primary=$(realpath -m "$3")
    prepare_dir "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_postgres "$BIN/pg_basebackup" -h "$(socket_dir "$primary")" -p "$SOCKET_PORT" \
            -U postgres -D "$dir/data" --write-recovery-conf --wal-method=stream \
            --checkpoint=fast --no-sync
    fi
    start "$dir" "" -c hot_standby=on "${@:4}"
    ;;
socket)
    socket_dir "$(realpath -m "$2")"
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
bouncer)
    dir=$(realpath -m "$2") server=$(realpath -m "$3") database=$4
    sockets=$(socket_dir "$dir")
    prepare_dir "$dir"
    prepare_dir "$sockets"
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
$database = host=$(socket_dir "$server") port=$SOCKET_PORT dbname=$database user=postgres
[pgbouncer]
listen_addr =
listen_port = $SOCKET_PORT
unix_socket_dir = $sockets
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 50
default_pool_size = 4
# pgjdbc sends extra_float_digits at start-up, which PgBouncer refuses unless told to ignore it.
ignore_startup_parameters = extra_float_digits
# A client that lost track of its transaction (the driver suite's controls do) must not hold a
# server connection for ever: close it after 10 s idle in a transaction; clients waiting for a
# server connection get an error after 20 s.
idle_transaction_timeout = 10
query_wait_timeout = 20
pidfile = $dir/pgbouncer.pid
logfile = $dir/pgbouncer.log
INI
    echo '"postgres" ""' >"$dir/users.txt"
    chown postgres:postgres "$dir/pgbouncer.ini" "$dir/users.txt"
    as_postgres pgbouncer -d -q "$dir/pgbouncer.ini"
    for _ in $(seq 50); do
        [ -S "$sockets/.s.PGSQL.$SOCKET_PORT" ] && exit 0
        sleep 0.1
    done
    fail_with_log "PgBouncer in $dir did not start" "$dir/pgbouncer.log"
    ;;
bouncer-stop)
    pidfile=$(realpath -m "$2")/pgbouncer.pid
    if [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null; then
        for _ in $(seq 50); do
            [ -f "$pidfile" ] || break
            sleep 0.1
        done
    fi
    ;;
*)
    echo "usage: pg.sh start DIR [-c name=value ...] | tcp DIR PORT [-c ...]" \
        "| standby DIR PRIMARY_DIR [-c ...] | socket|stop|crash|promote DIR" \
        "| bouncer DIR SERVER_DIR DATABASE | bouncer-stop DIR" >&2
    exit 2
    ;;
esac
