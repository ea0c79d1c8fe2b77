#!/usr/bin/env bash
# The upgrade chain, against the running test server whose socket directory is $1: from 0.1.0
# to 0.4.0 (each release's install script as shipped, sql/fenced_lock--X.sql), use it,
# change privileges as a DBA would, ALTER EXTENSION UPDATE, then: the extension's catalog and
# privileges equal a fresh install's given the same changes, the data and the token position
# survived, and the pg_regress suite passes on the upgraded database.
# Also: the shipped scripts of earlier releases are unchanged (sql/shipped.sha256).
# Runs on the major of the psql and $PGXS that sql-tests.sh gives it; $2 is its output
# directory. Prints "upgrade$SUITE_SUFFIX: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

host=$1 OUT=$2
: "${PGXS:?PGXS must be the PGXS test directory (sql-tests.sh exports it)}"
: "${PG_BIN:?PG_BIN must be the bin directory of that major (sql-tests.sh exports it)}"
sql() { psql "host=$host user=postgres dbname=$1" -qXAt -v ON_ERROR_STOP=1 "${@:2}"; }
SUITE=upgrade${SUITE_SUFFIX:-}
. scripts/checks.sh

# A DBA's privileges, granted and revoked before the upgrade: the upgrade keeps them, on the
# object itself, or on the 1.0 function that replaced it (the one that does what it did).
# Objects of every release since 0.1.0:
common_revoked=("FUNCTION acquire_fenced_session(integer, integer)" "TABLE fenced_locks"
    "FUNCTION fenced_lock_grants()" "FUNCTION release_fenced(integer, integer)"
    "FUNCTION current_fence(integer, integer)" "FUNCTION release_all_fenced()"
    "FUNCTION acquire_fenced(integer, integer)" "FUNCTION force_release(integer, integer)"
    "FUNCTION fenced_update(regclass, anyelement, bigint, jsonb, text, text)")
common_granted=("EXECUTE ON FUNCTION acquire_fenced_session(integer, integer)"
    "SELECT ON TABLE fenced_locks")
# Their 1.0 names, for the fresh install.
fresh_revoked=("FUNCTION acquire_fenced_session(integer, integer, interval, text, boolean)"
    "TABLE fenced_locks" "FUNCTION fenced_lock_internal.fenced_lock_grants()"
    "FUNCTION release_fenced(integer, integer, text)" "FUNCTION current_fence(integer, integer, text)"
    "FUNCTION release_all_fenced(text)" "FUNCTION acquire_fenced(integer, integer, interval, boolean)"
    "FUNCTION force_release(integer, integer)"
    "FUNCTION fenced_update_or_false(regclass, anyelement, bigint, jsonb, text, text)")
fresh_granted=("EXECUTE ON FUNCTION acquire_fenced_session(integer, integer, interval, text, boolean)"
    "SELECT ON TABLE fenced_locks")
# The forms the upgrades to 0.2.0 and 0.3.0 derived from those (with their privileges), as
# 1.0 names them: from 0.1.0 or 0.2.0 ...
derived_revoked=("FUNCTION acquire_fenced_all(integer, integer[], interval)"
    "FUNCTION fenced_update(regclass, anyelement, bigint, jsonb, text, text)")
# ... and from 0.1.0 also the named forms.
derived_revoked_010=("FUNCTION current_fence_named(text, text, text)"
    "FUNCTION force_release_named(text, text)" "FUNCTION release_fenced_named(text, text, text)")

# Runs "$verb <privilege> ON <object> <preposition> <role>" for each object, on database $1.
privileges() {
    local database=$1 verb=$2 privilege=$3 preposition=$4 role=$5
    shift 5
    local object statements=()
    for object in "$@"; do
        case $privilege in
            ALL) statements+=(-c "$verb ALL ON $object $preposition $role") ;;
            *) statements+=(-c "$verb $object $preposition $role") ;;
        esac
    done
    sql "$database" "${statements[@]}"
}

# A released script is never edited: a change would give upgraded and fresh databases of
# that release different objects. A new release adds a new script.
if sha256sum --quiet -c sql/shipped.sha256 >"$OUT/shipped.log" 2>&1; then
    check "released install and upgrade scripts unchanged (sql/shipped.sha256)" same same
else
    cat "$OUT/shipped.log"
    check "released install and upgrade scripts unchanged (sql/shipped.sha256)" changed same
fi

sql postgres -c "DO \$\$ BEGIN CREATE ROLE upgrade_auditor; EXCEPTION WHEN duplicate_object THEN END \$\$"

# From each earlier release: create it (its install script as shipped), use it, change its
# privileges, ALTER EXTENSION UPDATE, then compare with a fresh install given the same changes.
for from in 0.1.0 0.2.0 0.3.0 0.4.0; do
    upgraded=fenced_lock_upgraded_${from//./_} fresh=fenced_lock_fresh_${from//./_}
    sql postgres -c "DROP DATABASE IF EXISTS $upgraded" -c "DROP DATABASE IF EXISTS $fresh" \
        -c "CREATE DATABASE $upgraded" -c "CREATE DATABASE $fresh"
    # Used as the old release left it. The 1.0 library runs only what 1.0 kept of the old SQL
    # (the rest raises 55000 until the update: docs/upgrading.md): the registry, the ledger,
    # fenced_key, and rows written as the old functions wrote them.
    sql "$upgraded" -c "CREATE EXTENSION fenced_lock VERSION '$from'" \
        -c "SELECT register_namespace('upgrade-ns', 77, 'made on $from')" \
        -c "SELECT fence_check('upgrade-resource', 42)" >/dev/null
    # A 0.1.0 function the update replaces, called before it: 55000 naming the update.
    check "$from: a replaced function before the update" \
        "$(sql "$upgraded" -c "BEGIN" -c "SELECT acquire_fenced(77, 1, '1 s')" 2>&1 | grep -o 'ALTER EXTENSION fenced_lock UPDATE' | head -1)" \
        "ALTER EXTENSION fenced_lock UPDATE"
    # A lease held across the upgrade (0.2.0 has leases; 0.3.0 added its lock-delay).
    [ "$from" = 0.2.0 ] && sql "$upgraded" -c "INSERT INTO fenced_lease_state
        VALUES (77, 1, NULL, 'old-holder', 'postgres', nextval('fencing_token_seq'), now(), now(),
                now() + interval '1 hour')" >/dev/null
    # The last token the old release issued (tokens rise).
    position=$(sql "$upgraded" -c "SELECT last_value FROM fencing_token_seq")
    named_key_before=$(sql "$upgraded" -c "SELECT fenced_key('order:1')")
    privileges "$upgraded" REVOKE ALL FROM PUBLIC "${common_revoked[@]}"
    privileges "$upgraded" GRANT "" TO upgrade_auditor "${common_granted[@]}"
    sql "$upgraded" -c "ALTER EXTENSION fenced_lock UPDATE"
    sql "$fresh" -c "CREATE EXTENSION fenced_lock"
    privileges "$fresh" REVOKE ALL FROM PUBLIC "${fresh_revoked[@]}"
    privileges "$fresh" GRANT "" TO upgrade_auditor "${fresh_granted[@]}"
    case $from in 0.1.0 | 0.2.0) privileges "$fresh" REVOKE ALL FROM PUBLIC "${derived_revoked[@]}" ;; esac
    [ "$from" = 0.1.0 ] && privileges "$fresh" REVOKE ALL FROM PUBLIC "${derived_revoked_010[@]}"

    check "$from: version after ALTER EXTENSION UPDATE" \
        "$(sql "$upgraded" -c "SELECT extversion FROM pg_extension WHERE extname = 'fenced_lock'")" \
        "$(sql "$fresh" -c "SELECT extversion FROM pg_extension WHERE extname = 'fenced_lock'")"
    sql "$upgraded" -f pg_test/upgrade/catalog.sql >"$OUT/catalog.$from.upgraded"
    sql "$fresh" -f pg_test/upgrade/catalog.sql >"$OUT/catalog.$from.fresh"
    if diff -u "$OUT/catalog.$from.fresh" "$OUT/catalog.$from.upgraded" >"$OUT/catalog.$from.diff"; then
        check "$from: catalog and privileges equal a fresh install's" same same
    else
        cat "$OUT/catalog.$from.diff"
        check "$from: catalog and privileges equal a fresh install's ($OUT/catalog.$from.diff)" \
            different same
    fi
    # What a dump keeps (and a restore brings back): the same schema and privileges. pg_dump
    # writes an extension member's privileges as changes from those the extension's scripts
    # set (pg_init_privs), so a privilege the upgrade carried over must not count as the
    # scripts' own.
    for database in "$upgraded" "$fresh"; do
        pg_dump --host="$host" --username=postgres --schema-only "$database" |
            grep -v '^-- Dumped\|^\\restrict\|^\\unrestrict' >"$OUT/dump.$from.$database"
    done
    if diff -u "$OUT/dump.$from.$fresh" "$OUT/dump.$from.$upgraded" >"$OUT/dump.$from.diff"; then
        check "$from: a schema dump equals a fresh install's" same same
    else
        cat "$OUT/dump.$from.diff"
        check "$from: a schema dump equals a fresh install's ($OUT/dump.$from.diff)" different same
    fi
    check "$from: namespace registered before" \
        "$(sql "$upgraded" -c "SELECT ns || ' ' || description FROM fenced_namespaces WHERE name = 'upgrade-ns'")" \
        "77 made on $from"
    check "$from: ledger row" \
        "$(sql "$upgraded" -c "SELECT token FROM fence_ledger WHERE resource = 'upgrade-resource'")" 42
    check "$from: tokens continue above the old release's" \
        "$(sql "$upgraded" -c "BEGIN" -c "SELECT acquire_fenced(77, 99) > $position" -c "COMMIT")" t
    check "$from: tokens continue from the clock, as a fresh install's start" \
        "$(sql "$upgraded" -c "BEGIN" -c "SELECT acquire_fenced(77, 98) > ((date_part('epoch', now()) - 946684800 - 60) * 1000000)::bigint" -c "COMMIT")" t
    check "$from: a text key hashes as before" \
        "$(sql "$upgraded" -c "SELECT fenced_key('order:1')")" "$named_key_before"

    if [ "$from" = 0.2.0 ]; then
        check "$from: a lease held across the upgrade has no lock-delay" \
            "$(sql "$upgraded" -c "SELECT owner || ' ' || (lock_delay = '0' AND available_at = expires_at) FROM fenced_leases WHERE ns = 77 AND id = 1")" \
            "old-holder true"
    fi

    # The suite expects a database without rows of its own, with the default privileges.
    privileges "$upgraded" GRANT ALL TO PUBLIC "${fresh_revoked[@]}"
    privileges "$upgraded" REVOKE "" FROM upgrade_auditor "${fresh_granted[@]}"
    privileges "$upgraded" GRANT ALL TO PUBLIC "${derived_revoked[@]}" "${derived_revoked_010[@]}"
    # GRANT ALL on the view gave PUBLIC more than SELECT: back to the install's own grant.
    sql "$upgraded" -c "REVOKE ALL ON fenced_locks FROM PUBLIC" \
        -c "GRANT SELECT ON fenced_locks TO PUBLIC" \
        -c "DELETE FROM fence_ledger" -c "DELETE FROM fenced_namespaces" \
        -c "DELETE FROM fenced_lease_state"
    tests=$(cd pg_test/sql && ls ./*.sql | sed 's|^\./||; s|\.sql$||')
    if "$PGXS/regress/pg_regress" --bindir="$PG_BIN" --host="$host" --user=postgres \
        --inputdir=pg_test --outputdir="$OUT/regress-$from" --use-existing --dbname="$upgraded" $tests \
        >"$OUT/regress-$from.log" 2>&1; then
        check "$from: pg_regress suite on the upgraded database" ok ok
    else
        cat "$OUT/regress-$from.log"
        [ -f "$OUT/regress-$from/regression.diffs" ] && cat "$OUT/regress-$from/regression.diffs"
        check "$from: pg_regress suite on the upgraded database" failed ok
    fi
    sql postgres -c "DROP DATABASE $fresh"
done
sql postgres -c "DROP ROLE upgrade_auditor"
finish
