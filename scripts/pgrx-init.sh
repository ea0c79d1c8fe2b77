#!/usr/bin/env bash
# Records the given pg_configs in pgrx's config ($PGRX_HOME/config.toml, the checkout's own),
# keeping the other majors it records whose pg_config still exists. Runs `cargo pgrx init`
# (which downloads nothing) only when something changes. Refuses unsupported majors first.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PGRX_HOME:?PGRX_HOME must be set (the Makefile sets it)}"
config=$PGRX_HOME/config.toml
declare -A wanted=()
for pg_config in "$@"; do
    major=$(scripts/pg-major.sh "$pg_config")
    wanted[$major]=$pg_config
done
declare -A recorded=()
if [ -f "$config" ]; then
    while IFS='=' read -r major path; do
        recorded[$major]=$path
    done < <(sed -nE 's/^pg([0-9]+) = "(.*)"$/\1=\2/p' "$config")
fi
changed=false
for major in "${!wanted[@]}"; do
    [ "${recorded[$major]:-}" = "${wanted[$major]}" ] || changed=true
done
$changed || exit 0
arguments=()
for major in "${!recorded[@]}"; do
    if [ -z "${wanted[$major]:-}" ] && [ -x "${recorded[$major]}" ]; then
        arguments+=("--pg$major" "${recorded[$major]}")
    fi
done
for major in "${!wanted[@]}"; do
    arguments+=("--pg$major" "${wanted[$major]}")
done
mkdir -p "$PGRX_HOME"
echo "setup: cargo pgrx init ${arguments[*]}"
cargo pgrx init "${arguments[@]}" </dev/null
