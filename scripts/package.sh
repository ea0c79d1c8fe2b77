#!/usr/bin/env bash
# `make package`: one Debian package per PostgreSQL major, laid out as Debian's PostgreSQL
# packages are (postgresql-15-fenced-lock_1.0.0-1_amd64.deb: the library under
# /usr/lib/postgresql/15/lib, the control file and every release's install and upgrade scripts
# under /usr/share/postgresql/15/extension, the README, CHANGELOG and licence under
# /usr/share/doc), depending on that major's server package. Built by `cargo pgrx package`
# from the committed tree; the arguments are pg_configs, one per major. Prints each package's
# path; the packages are left in build/packages.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(scripts/version.sh)
MAINTAINER=$(python3 -c 'import json; print(json.load(open("META.json"))["maintainer"][0])')
REVISION=1
ARCH=$(dpkg --print-architecture)
OUT=$PWD/build/packages
mkdir -p "$OUT"
# A package is built from committed sources only (FENCED_LOCK_PACKAGE_DIRTY=1 allows a trial
# build of a working tree).
inputs=(Cargo.toml Cargo.lock fenced_lock.control src sql README.md CHANGELOG.md LICENSE META.json)
if [ -n "$(git status --porcelain -- "${inputs[@]}")" ] && [ -z "${FENCED_LOCK_PACKAGE_DIRTY:-}" ]; then
    echo "package: commit these first:" $(git status --porcelain -- "${inputs[@]}") >&2
    exit 2
fi

for pg_config in "$@"; do
    major=$(scripts/pg-major.sh "$pg_config")
    name=postgresql-$major-fenced-lock
    work=$OUT/$name
    rm -rf "$work"
    # pgrx lays the files out under the pg_config's own directories (for the wheels, a
    # virtual environment); the package puts them where Debian's postgresql-N has its own.
    CARGO_TARGET_DIR=target$([ "$major" = 15 ] || echo "/pg$major") cargo pgrx package \
        --pg-config "$pg_config" --out-dir "$work/pgrx" >"$work.build.log" 2>&1 ||
        { cat "$work.build.log"; exit 1; }
    root=$work/root
    lib=$root/usr/lib/postgresql/$major/lib
    extension=$root/usr/share/postgresql/$major/extension
    doc=$root/usr/share/doc/$name
    install -d "$lib" "$extension" "$doc" "$root/DEBIAN"
    install -m 755 "$work/pgrx$("$pg_config" --pkglibdir)/fenced_lock.so" "$lib/"
    strip --strip-unneeded "$lib/fenced_lock.so"
    install -m 644 "$work/pgrx$("$pg_config" --sharedir)"/extension/fenced_lock* "$extension/"
    # The install scripts of earlier releases, as shipped: a database of any release can be
    # created and upgraded.
    install -m 644 $(scripts/released-scripts.sh) "$extension/"
    install -m 644 README.md CHANGELOG.md "$doc/"
    install -m 644 LICENSE "$doc/copyright"
    # The newest glibc symbol version the library needs.
    glibc=$(objdump -T "$lib/fenced_lock.so" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' |
        sort -V | tail -1)
    cat >"$root/DEBIAN/control" <<CONTROL
Package: $name
Version: $VERSION-$REVISION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $(du -sk "$root/usr" | cut -f1)
Depends: postgresql-$major, libc6 (>= $glibc)
Section: database
Priority: optional
Description: fenced advisory locks for PostgreSQL $major
 fenced_lock takes PostgreSQL's advisory lock and, in the same call, returns a
 fencing token that only rises, so a resource can refuse the writes of a holder
 that was paused past its lease. Includes leases, leader election, the
 fenced_update function, the enforce_fence trigger and the fenced_locks view.
CONTROL
    package=$OUT/${name}_$VERSION-${REVISION}_$ARCH.deb
    dpkg-deb --root-owner-group -Zxz --build "$root" "$package" >/dev/null
    echo "$package"
done
