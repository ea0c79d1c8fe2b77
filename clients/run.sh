#!/usr/bin/env bash
# `make clients`: each client library (clients/*/) built into the package users install,
# installed from it into a scratch environment under build/clients, and tested against a
# PostgreSQL server of its own (fenced_lock preloaded), directly and through PgBouncer in
# transaction mode: the conformance scenarios (clients/conformance.md) and the fault tests.
# Prints each library's lines and "clients (LANGUAGE): N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

ROOT=$PWD/build/clients
SERVER=$ROOT/pg
DATABASE=fenced_lock_clients
# What every start of the test server passes (the fault tests restart it the same way).
SERVER_OPTIONS="-c shared_preload_libraries=fenced_lock -c max_connections=200"
mkdir -p "$ROOT"

scripts/pg.sh stop "$SERVER"
scripts/pg.sh bouncer-stop "$ROOT/pgbouncer"
# shellcheck disable=SC2086 # the options are words
scripts/pg.sh start "$SERVER" $SERVER_OPTIONS || exit 1
trap 'scripts/pg.sh bouncer-stop "$ROOT/pgbouncer"; scripts/pg.sh stop "$SERVER"' EXIT
host=$(scripts/pg.sh socket "$SERVER")
psql "host=$host user=postgres dbname=postgres" -qX -c "DROP DATABASE IF EXISTS $DATABASE" \
    -c "CREATE DATABASE $DATABASE" >/dev/null || exit 1
psql "host=$host user=postgres dbname=$DATABASE" -qX -c "CREATE EXTENSION fenced_lock" \
    -c "CREATE TABLE documents (id int PRIMARY KEY, body text, fence bigint)" \
    -c "INSERT INTO documents SELECT g, NULL, NULL FROM generate_series(1, 1000) g" >/dev/null ||
    exit 1
scripts/pg.sh bouncer "$ROOT/pgbouncer" "$SERVER" "$DATABASE" || exit 1
# The extension in a schema of its own (CREATE EXTENSION ... SCHEMA fenced): the libraries
# call the functions unqualified, and find them through the connection's search_path.
psql "host=$host user=postgres dbname=postgres" -qX -c "DROP DATABASE IF EXISTS ${DATABASE}_schema" \
    -c "CREATE DATABASE ${DATABASE}_schema" >/dev/null || exit 1
psql "host=$host user=postgres dbname=${DATABASE}_schema" -qX -c "CREATE SCHEMA fenced" \
    -c "CREATE EXTENSION fenced_lock SCHEMA fenced" \
    -c "CREATE TABLE documents (id int PRIMARY KEY, body text, fence bigint)" \
    -c "INSERT INTO documents SELECT g, NULL, NULL FROM generate_series(1, 10) g" >/dev/null ||
    exit 1
export CLIENTS_SCHEMA_DSN="host=$host user=postgres dbname=${DATABASE}_schema options='-c search_path=fenced,public'"

export CLIENTS_DSN="host=$host user=postgres dbname=$DATABASE"
export CLIENTS_POOLED_DSN="host=$(scripts/pg.sh socket "$ROOT/pgbouncer") user=postgres dbname=$DATABASE"
export CLIENTS_SERVER_DIR=$SERVER CLIENTS_SERVER_OPTIONS=$SERVER_OPTIONS CLIENTS_WORK=$ROOT

# Python: the sdist and wheel `python -m build` makes, the wheel installed with pip into a
# venv of its own. The tests run from their folder, with PYTHONPATH for scripts/real_parts.py
# only, so `import fenced_lock` finds the installed wheel, never the source tree.
python_suite() {
    local venv=$ROOT/python/venv dist=$ROOT/python/dist
    scripts/venv.sh "$ROOT/python/build-venv" build==1.6.1 &&
        rm -rf "$dist" "$ROOT/python/source" &&
        # From a copy: setuptools writes its egg-info next to the sources.
        cp -r clients/python "$ROOT/python/source" &&
        "$ROOT/python/build-venv/bin/python" -m build --outdir "$dist" "$ROOT/python/source" \
            >"$ROOT/python/build.log" 2>&1 &&
        scripts/venv.sh "$venv" 'psycopg[binary]==3.3.9' pytest==9.2.0 mypy==2.4.1 &&
        "$venv/bin/pip" install -q --no-deps --force-reinstall "$dist"/fenced_lock-*.whl </dev/null ||
        { tail -20 "$ROOT/python/build.log"; return 1; }
    cd clients/python/tests &&
        PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$PWD/../../../scripts \
            "$venv/bin/python" -m pytest -p no:cacheprovider -q -rfE .
}

# Node.js: the tarball `npm pack` makes, installed with npm into a scratch project (with pg and
# TypeScript, as a user's app has them); the tests run from a copy inside that project, so
# `import 'fenced-lock'` finds the installed package, never the source tree.
node_suite() {
    local app=$ROOT/node/app dist=$ROOT/node/dist
    rm -rf "$dist" "$app/test" "$app/node_modules/fenced-lock" "$app/package-lock.json" &&
        mkdir -p "$dist" "$app" &&
        # npm's cache, and the debug log it writes on every call, stay in the checkout.
        npm pack --silent --cache "$ROOT/npm-cache" --pack-destination "$dist" ./clients/node \
            >"$ROOT/node/pack.log" 2>&1 &&
        TARBALL=$(ls "$dist"/fenced-lock-*.tgz) node -e '
            require("fs").writeFileSync(process.argv[1], JSON.stringify({
                private: true, type: "module", dependencies: {
                    "fenced-lock": "file:" + process.env.TARBALL, pg: "8.23.1",
                    typescript: "7.0.2", "@types/node": "20.19.43", "@types/pg": "8.23.1" } }))
        ' "$app/package.json" &&
        (cd "$app" && npm install --silent --no-audit --no-fund --cache "$ROOT/npm-cache" \
            </dev/null) >"$ROOT/node/install.log" 2>&1 ||
        { tail -20 "$ROOT/node/pack.log" "$ROOT/node/install.log"; return 1; }
    cp -r clients/node/test "$app/test"
    # The server restart last, on its own: it ends every session.
    cd "$app" && export CLIENTS_SCRIPTS=$OLDPWD/scripts &&
        node --test --test-concurrency=1 --test-reporter=tap test/conformance.test.mjs \
            test/errors.test.mjs test/types.test.mjs test/faults.test.mjs test/schema.test.mjs
    node --test --test-reporter=tap test/restart.test.mjs
}

# Go: the module zip the Go proxy would serve (every file of clients/go under
# MODULE@VERSION/), unpacked into a scratch GOPATH and built offline against Debian's pgx v4
# (GOPATH mode, as the driver suite builds), as a program of a user's would be; gofmt, go vet,
# then the tests from the installed copy (the server restart last, in a package of its own).
GO_MODULE=github.com/fenced-lock/fenced_lock/clients/go
go_suite() {
    local gopath=$ROOT/go/gopath dist=$ROOT/go/dist version
    version=v$(scripts/version.sh)
    rm -rf "$dist" "$gopath/src/$GO_MODULE" && mkdir -p "$dist" "$gopath/src/${GO_MODULE%/go}" &&
        python3 -c '
import os, sys, zipfile
source, archive, prefix = sys.argv[1:]
with zipfile.ZipFile(archive, "w") as module:
    for directory, _, files in os.walk(source):
        for name in sorted(files):
            path = os.path.join(directory, name)
            module.write(path, prefix + "/" + os.path.relpath(path, source))
with zipfile.ZipFile(archive) as module:
    module.extractall(os.path.dirname(archive))
' clients/go "$dist/go@$version.zip" "go@$version" &&
        mv "$dist/go@$version" "$gopath/src/$GO_MODULE" || return 1
    export GO111MODULE=off GOPATH=$gopath:/usr/share/gocode GOCACHE=$ROOT/go/cache \
        CLIENTS_GO_HOLDER=$ROOT/go/holder CLIENTS_SCRIPTS=$PWD/scripts
    cd "$gopath/src/$GO_MODULE" || return 1
    local unformatted
    unformatted=$(gofmt -l .)
    if [ -z "$unformatted" ]; then echo "--- PASS: gofmt"; else echo "--- FAIL: gofmt: $unformatted"; fi
    if go vet ./...; then echo "--- PASS: go vet"; else echo "--- FAIL: go vet"; fi
    go build -o "$CLIENTS_GO_HOLDER" ./internal/holder &&
        go test -v -count=1 . &&
        go test -v -count=1 ./restart
}

# Rust: the crate `cargo package` makes (and verifies by building it, in the target directory
# the later builds share), unpacked as a user's registry would; its docs, unit tests and doc
# examples built and run from there; then the test suite (clients/rust/testsuite), a program of
# a user's that depends on it.
rust_suite() {
    local target=$PWD/target/clients-rust crate
    rm -rf "$ROOT/rust" && mkdir -p "$ROOT/rust" &&
        cargo package -q --allow-dirty --manifest-path clients/rust/Cargo.toml \
            --target-dir "$target" &&
        crate=$(ls "$target"/package/fenced-lock-*.crate) &&
        # -m: extracted now, so that cargo sees the sources changed since the last run.
        tar -xzmf "$crate" -C "$ROOT/rust" &&
        mv "$ROOT/rust/$(basename "$crate" .crate)" "$ROOT/rust/fenced-lock" &&
        cp -r clients/rust/testsuite "$ROOT/rust/testsuite" || return 1
    export CLIENTS_SCRIPTS=$PWD/scripts
    (cd "$ROOT/rust/fenced-lock" && RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps \
        --target-dir "$target" && cargo test -q --target-dir "$target") &&
        (cd "$ROOT/rust/testsuite" &&
            cargo clippy -q --all-targets --target-dir "$target" -- -D warnings &&
            cargo test -q --target-dir "$target" -- --test-threads=1)
}

# pytest's last line: "N passed, M failed in S s" (either part absent when 0).
pytest_counts() {
    local last
    last=$(tail -1 "$1")
    echo "$(grep -oE '[0-9]+ passed' <<<"$last" | grep -oE '[0-9]+' || echo 0)" \
        "$(grep -oE '[0-9]+ (failed|errors?)' <<<"$last" | awk '{ n += $1 } END { print n + 0 }')"
}

# node --test's TAP summaries: "# pass N", "# fail M" (one a run).
tap_counts() {
    echo "$(awk '/^# pass /{ n += $3 } END { print n + 0 }' "$1")" \
        "$(awk '/^# fail /{ n += $3 } END { print n + 0 }' "$1")"
}

# go test -v: a "--- PASS" or "--- FAIL" line a test and subtest (gofmt and go vet print theirs),
# and "FAIL" lines for a package that failed or did not build.
gotest_counts() {
    echo "$(grep -cE '^ *--- PASS' "$1")" \
        "$(($(grep -cE '^ *--- FAIL' "$1") + $(grep -cE '^FAIL' "$1")))"
}

# cargo test: a "test result: ... N passed; M failed" line a test binary.
cargo_counts() {
    awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i + 1) ~ /^passed/) p += $i;
         if ($(i + 1) ~ /^failed/) f += $i } } END { print p + 0, f + 0 }' "$1"
}

# Runs a library's suite (LANGUAGE_suite), its output kept in build/clients/LANGUAGE.log, and
# prints "clients (LANGUAGE): N passed, M failed" from the counts COUNTS reads there (none at
# all, or none failed in a suite that ended in error, is a failure). CLIENTS="node" (say) runs
# only the libraries named.
status=0
suite() {
    local language=$1 counts=$2 log=$ROOT/$1.log passed failed
    [[ " ${CLIENTS:-python node go rust} " == *" $language "* ]] || return 0
    local outcome
    ("${language}_suite") 2>&1 | tee "$log"
    outcome=$?
    read -r passed failed < <("$counts" "$log")
    if ((passed + failed == 0 || (outcome != 0 && failed == 0))); then failed=$((failed + 1)); fi
    echo "clients ($language): $passed passed, $failed failed"
    ((failed == 0)) || status=1
}

suite python pytest_counts
suite node tap_counts
suite go gotest_counts
suite rust cargo_counts
exit $status
