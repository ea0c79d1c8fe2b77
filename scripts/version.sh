#!/usr/bin/env bash
# fenced_lock's version, from Cargo.toml (the control file and the packages take it from there).
sed -n 's/^version = "\(.*\)"$/\1/p' "$(dirname "$0")/../Cargo.toml" | head -1
