#!/usr/bin/env bash
# The major of the PostgreSQL whose pg_config is $1, when fenced_lock supports it; otherwise one
# line naming the supported majors on stderr and exit status 2, before anything is built.
set -euo pipefail
SUPPORTED=(15 16 18)
pg_config=${1:?usage: pg-major.sh /path/to/pg_config}
if ! version=$("$pg_config" --version 2>/dev/null); then
    echo "fenced_lock: $pg_config is not a pg_config that runs (give PG_CONFIG=/path/to/pg_config)" >&2
    exit 2
fi
# "PostgreSQL 15.20 (Debian ...)", "PostgreSQL 18.6", "PostgreSQL 19devel"
major=$(sed -E 's/^PostgreSQL ([0-9]+).*/\1/' <<<"$version")
for supported in "${SUPPORTED[@]}"; do
    if [ "$major" = "$supported" ]; then
        echo "$major"
        exit 0
    fi
done
echo "fenced_lock supports PostgreSQL 15, 16 and 18 only; $pg_config is ${version%% (*}" >&2
exit 2
