#!/usr/bin/env bash
# scripts/venv.sh DIR NAME==VERSION ...: a Python venv (Debian's python3-venv) at DIR holding
# the pinned PyPI packages, made again only when one of them is missing or at another version.
set -euo pipefail
dir=$1
shift
if [ "$("$dir/bin/pip" freeze 2>/dev/null | grep -cxF "${@/#/-e}")" != $# ]; then
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --no-cache-dir "$@" </dev/null
fi
