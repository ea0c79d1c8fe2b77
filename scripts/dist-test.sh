#!/usr/bin/env bash
# PGXN: META.json validates against its meta-spec (pgxn_meta, the PGXN project's validator,
# which setup.sh installs into build/tools) and agrees with Cargo.toml; `make dist` makes the
# archive PGXN takes, whose META.json validates too. Prints "dist: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
SUITE=dist OUT=build/dist-test
. scripts/checks.sh
VALIDATE=build/tools/bin/pgxn_meta
meta() { python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

check "META.json validates" "$("$VALIDATE" META.json 2>&1)" "META.json is OK"
# The validator refuses what it should: the same file without its version.
python3 -c 'import json; m = json.load(open("META.json")); del m["version"]; json.dump(m, open("'$OUT'/broken.json", "w"))'
check "a META.json without a version is refused" \
    "$("$VALIDATE" "$OUT/broken.json" >/dev/null 2>&1; echo $?)" 1
check "META.json version is Cargo.toml's" "$(meta META.json 'm["version"]')" "$VERSION"
check "META.json's extension version is Cargo.toml's" \
    "$(meta META.json 'm["provides"]["fenced_lock"]["version"]')" "$VERSION"
check "META.json requires the oldest supported major" \
    "$(meta META.json 'm["prereqs"]["runtime"]["requires"]["PostgreSQL"]')" 15.0.0
check "the control file takes its version from Cargo.toml" \
    "$(sed -n "s/^default_version = '\(.*\)'$/\1/p" fenced_lock.control)" "@CARGO_VERSION@"

archive=build/dist/fenced_lock-$VERSION.zip
rm -f "$archive"
make -s dist >"$OUT/dist.log" 2>&1
check "make dist writes $archive" "$(ls "$archive" 2>/dev/null | wc -l)" 1
unzip -q -d "$OUT/unpacked" "$archive" 2>/dev/null
check "the archive holds the committed tree under fenced_lock-$VERSION/" \
    "$(cd "$OUT/unpacked/fenced_lock-$VERSION" 2>/dev/null && find . -type f | sed 's|^\./||' | sort | md5sum)" \
    "$(git ls-tree -r --name-only HEAD | sort | md5sum)"
check "the archive's META.json validates" \
    "$(cd "$OUT/unpacked/fenced_lock-$VERSION" 2>/dev/null && "$OLDPWD/$VALIDATE" META.json 2>&1)" \
    "META.json is OK"
finish
