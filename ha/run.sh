#!/usr/bin/env bash
# `make ha`: fenced_lock under Patroni + etcd (ha/ha.py), as root, everything under build/ha.
#   ha/run.sh           both modes (synchronous, asynchronous) and the control
#   ha/run.sh --quick   one fault of each kind in synchronous mode, and the control once
#                       (`make test`)
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
# caches in the checkout.
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 ha/ha.py build/ha "$@"
