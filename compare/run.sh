#!/usr/bin/env bash
# `make compare`: the failure table measured (compare/compare.py), as root, under build/compare.
#   compare/run.sh           every cell, 3 trials each; writes docs/compare.md and
#                            docs/compare.png from the run
#   compare/run.sh --quick   the short form (`make test`): fenced_lock, Redis, Redlock and the
#                            controls, one trial per cell; build/compare/run only
#   compare/run.sh --only F  the faults whose names contain F (to iterate): build/ only
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD/build/compare
for command in redis-server redis-sentinel etcd; do
    command -v "$command" >/dev/null || {
        echo "compare: $command is missing: make setup installs Debian's redis-server," \
            "redis-sentinel and etcd-server" >&2
        exit 2
    }
done
LIBFAKETIME=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
[ -f "$LIBFAKETIME" ] || {
    echo "compare: $LIBFAKETIME is missing: make setup installs Debian's libfaketime" >&2
    exit 2
}
mkdir -p "$ROOT"
# Loaded before libfaketime into redis-server (compare/faketime_shim.c says why).
if [ ! "$ROOT/faketime_shim.so" -nt compare/faketime_shim.c ]; then
    cc -shared -fPIC -O2 -Wall -Werror -o "$ROOT/faketime_shim.so" compare/faketime_shim.c -ldl
fi
# The clients, pinned, from PyPI into the checkout.
PYPI=(redis==8.1.0 pottery==3.0.1 etcd3gw==2.7.0 psycopg2-binary==2.9.13 matplotlib==3.11.2)
scripts/venv.sh "$ROOT/venv" "${PYPI[@]}"
rm -rf "$ROOT/run"
# No bytecode caches in the checkout.
export PYTHONDONTWRITEBYTECODE=1
# The modules compare shares with ha (scripts/: histories, the counters, real parts), for the
# harness and every worker it starts.
export PYTHONPATH=$PWD/scripts
# In the background, so that a SIGTERM or Ctrl-C to this script reaches compare.py, which
# stops every server it started (bash would otherwise exit and leave it running).
"$ROOT/venv/bin/python" compare/compare.py "$ROOT/run" "$@" &
compare=$!
trap 'kill -TERM "$compare" 2>/dev/null; wait "$compare"; exit 143' TERM INT
wait "$compare"
trap - TERM INT
# Only a full run (every cell, every trial) writes the published table.
if [ $# = 0 ]; then
    cp "$ROOT/run/compare.md" docs/compare.md
    cp "$ROOT/run/compare.png" docs/compare.png
    echo "compare: wrote docs/compare.md and docs/compare.png"
fi
