#!/usr/bin/env bash
# `make ha`: fenced_lock under Patroni + etcd (ha/ha.py), as root, everything under build/ha.
#   ha/run.sh           every mode (synchronous, asynchronous, the controls, etcd3,
#                       pg_auto_failover); writes docs/ha.md's results
#   ha/run.sh --quick   the short form of `make test` (both modes, the lagging replica, the
#                       frozen Patroni, one control, pg_auto_failover's lagging secondary);
#                       never writes docs/ha.md
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "ha: run as root (Patroni and PostgreSQL run as postgres, started with runuser)" >&2
    exit 2
fi
for command in patroni patronictl etcd; do
    command -v "$command" >/dev/null || {
        echo "ha: $command is missing: make setup installs Debian's patroni and etcd-server" >&2
        exit 2
    }
done
rm -rf build/ha
mkdir -p build/ha
# Debian's Python: Patroni's own psycopg2 (python3-psycopg2) comes with it. No bytecode
# caches in the checkout. scripts/ has the modules ha shares with compare.
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH=$PWD/scripts
/usr/bin/python3 ha/ha.py build/ha "$@" &
ha=$!
trap 'kill -TERM "$ha" 2>/dev/null; wait "$ha"; exit 143' TERM INT
status=0
wait "$ha" || status=$?
trap - TERM INT
# A full run's results replace docs/ha.md's, from its marker on (a failed run's too: the
# report says which checks failed), and README's figures are taken from them (ha/readme.py).
if [ $# = 0 ] && [ -f build/ha/results.md ]; then
    marker='<!-- The results below are written by `make ha`. -->'
    { sed "/^$marker\$/q" docs/ha.md; echo; cat build/ha/results.md; } >build/ha/ha.md
    grep -qxF "$marker" build/ha/ha.md && mv build/ha/ha.md docs/ha.md &&
        echo "ha: wrote docs/ha.md" &&
        /usr/bin/python3 ha/readme.py docs/ha.md README.md &&
        echo "ha: wrote README.md's figures from it"
fi
exit "$status"
