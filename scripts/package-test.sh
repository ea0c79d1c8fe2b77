#!/usr/bin/env bash
# The Debian packages as a user installs them (build them first: `make package`). Each
# package's name, version, dependency and file list are checked with dpkg-deb. Then on this
# machine's PostgreSQL 15: what `make install` put there is removed, the package is installed
# with dpkg -i, the pg_regress suite and the upgrade chain run against it, dpkg -r removes it
# and nothing of it is left. Finally `make install` puts the checkout's build back.
# Prints "package: N passed, M failed" (and the summary lines of the two SQL suites).
set -uo pipefail
cd "$(dirname "$0")/.."
SUITE=package OUT=$PWD/build/package-test
. scripts/checks.sh
ARCH=$(dpkg --print-architecture)

for major in 15 16 18; do
    name=postgresql-$major-fenced-lock
    deb=build/packages/${name}_$VERSION-1_$ARCH.deb
    check "$major: built as $deb" "$(ls "$deb" 2>/dev/null | wc -l)" 1
    [ -f "$deb" ] || continue
    field() { dpkg-deb --field "$deb" "$1"; }
    check "$major: package name" "$(field Package)" "$name"
    check "$major: version" "$(field Version)" "$VERSION-1"
    check "$major: depends on its server" "$(field Depends | grep -o "^postgresql-$major,")" \
        "postgresql-$major,"
    # Every file, and nothing else, in the places Debian's postgresql-N has its own.
    dpkg-deb --contents "$deb" | awk '$6 !~ /\/$/ { print $6 }' | sort >"$OUT/contents.$major"
    {
        echo "./usr/lib/postgresql/$major/lib/fenced_lock.so"
        for file in CHANGELOG.md README.md copyright; do
            echo "./usr/share/doc/$name/$file"
        done
        for file in fenced_lock.control fenced_lock--0.1.0.sql fenced_lock--0.1.0--0.2.0.sql \
            fenced_lock--0.2.0.sql fenced_lock--0.2.0--0.3.0.sql fenced_lock--0.3.0.sql \
            fenced_lock--0.3.0--0.4.0.sql fenced_lock--0.4.0.sql \
            fenced_lock--0.4.0--1.0.0.sql "fenced_lock--$VERSION.sql"; do
            echo "./usr/share/postgresql/$major/extension/$file"
        done
    } | sort >"$OUT/expected.$major"
    if diff -u "$OUT/expected.$major" "$OUT/contents.$major"; then
        check "$major: files" expected expected
    else
        check "$major: files" different expected
    fi
done

deb=build/packages/postgresql-15-fenced-lock_$VERSION-1_$ARCH.deb
LIB=/usr/lib/postgresql/15/lib EXTENSION=/usr/share/postgresql/15/extension
installed() { dpkg-query -W -f='${Status}' postgresql-15-fenced-lock 2>/dev/null | grep -c "ok installed"; }
# Whatever happens, the machine ends as `make install` left it.
restore() {
    [ "$(installed)" = 0 ] || dpkg -r postgresql-15-fenced-lock >/dev/null
    make -s install >"$OUT/restore.log" 2>&1 || { cat "$OUT/restore.log"; exit 1; }
}
trap restore EXIT
leftovers() { ls "$LIB"/fenced_lock* "$EXTENSION"/fenced_lock* /usr/share/doc/postgresql-15-fenced-lock 2>/dev/null | wc -l; }

rm -f "$LIB"/fenced_lock* "$EXTENSION"/fenced_lock*
check "make install's files removed" "$(leftovers)" 0
if dpkg -i "$deb" >"$OUT/dpkg-i.log" 2>&1; then
    check "dpkg -i" ok ok
else
    cat "$OUT/dpkg-i.log"
    check "dpkg -i" failed ok
fi
check "installed" "$(installed)" 1
check "the package's files are in place" \
    "$(dpkg -L postgresql-15-fenced-lock | while read -r path; do [ -e "$path" ] || echo "$path"; done)" ""
check "the library is the package's" "$(dpkg -S "$LIB/fenced_lock.so" | cut -d: -f1)" \
    postgresql-15-fenced-lock

. scripts/suite-line.sh
if PG=15 SQL_SUITES="regress upgrade" SQL_TESTS_ROOT="$OUT/sql" SUITE_SUFFIX=" (package)" \
    pass_suite_lines "$OUT/sql-tests.log" scripts/sql-tests.sh; then
    check "pg_regress and the upgrade chain on the package" ok ok
else
    without_suite_lines "$OUT/sql-tests.log"
    check "pg_regress and the upgrade chain on the package" failed ok
fi

dpkg -L postgresql-15-fenced-lock >"$OUT/files"
dpkg -r postgresql-15-fenced-lock >"$OUT/dpkg-r.log" 2>&1
check "dpkg -r" "$(installed)" 0
check "nothing of the package left" \
    "$(while read -r path; do [ -f "$path" ] && echo "$path"; done <"$OUT/files")" ""
check "no fenced_lock file left in PostgreSQL 15's directories" "$(leftovers)" 0
finish
