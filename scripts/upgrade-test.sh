#!/usr/bin/env bash
# The upgrade chain, against the running test server whose socket directory is $1: from 0.1.0,
# 0.2.0 and 0.3.0 (each release's install script as shipped, sql/fenced_lock--X.sql), use it,
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

# A DBA's privileges, granted and revoked before the upgrade: the upgrade keeps them, and gives
# the new forms of a function (named, bigint, owner forms) what that function had. Objects of
# both 0.1.0 and 0.2.0 (some dropped and created again by the 0.1.0 -> 0.2.0 script):
common_revoked=("FUNCTION acquire_fenced_session(integer, integer)" "TABLE fenced_locks"
    "FUNCTION current_leader(integer, integer)" "FUNCTION fenced_lock_grants()"
    "FUNCTION fenced_lock_holder(integer, integer)" "FUNCTION become_leader(integer, integer)"
    "FUNCTION release_fenced(integer, integer)" "FUNCTION current_fence(integer, integer)"
    "FUNCTION release_all_fenced()" "FUNCTION acquire_fenced(integer, integer)"
    "FUNCTION fenced_update(regclass, anyelement, bigint, jsonb, text, text)")
common_granted=("EXECUTE ON FUNCTION acquire_fenced_session(integer, integer)"
    "SELECT ON TABLE fenced_locks")
# 0.1.0's text forms, replaced by the named forms in 0.2.0.
revoked_010=("FUNCTION acquire_fenced(text, text)" "FUNCTION acquire_fenced_session(text, text)")
# The new forms of those in 0.3.0, from either release.
derived_revoked=("FUNCTION current_fence(integer, integer, text)" "FUNCTION release_all_fenced(text)"
    "FUNCTION fenced_update_strict(regclass, anyelement, bigint, jsonb, text, text)"
    "FUNCTION acquire_fenced_all(integer, integer[])"
    "FUNCTION acquire_fenced_all(integer, integer[], interval)")
# What those become on 0.3.0: the new forms of each, as the upgrade from 0.1.0 derives them.
derived_revoked_010=("FUNCTION current_fence_named(text, text)"
    "FUNCTION current_fence_named_bigint(text, bigint)"
    "FUNCTION current_fence_named(text, text, text)"
    "FUNCTION current_fence_named_bigint(text, bigint, text)"
    "FUNCTION acquire_fenced_session_owned(integer, integer, text)"
    "FUNCTION current_leader_named(text, text)" "FUNCTION current_leader_named_bigint(text, bigint)"
    "FUNCTION fenced_lock_holder_named(text, text)"
    "FUNCTION fenced_lock_holder_named_bigint(text, bigint)"
    "FUNCTION become_leader(integer, integer, text)" "FUNCTION become_leader_named(text, text)"
    "FUNCTION become_leader_named_bigint(text, bigint)"
    "FUNCTION become_leader_named(text, text, text)"
    "FUNCTION become_leader_named_bigint(text, bigint, text)"
    "FUNCTION release_fenced(integer, integer, text)" "FUNCTION release_fenced_named(text, text)"
    "FUNCTION release_fenced_named_bigint(text, bigint)"
    "FUNCTION release_fenced_named(text, text, text)"
    "FUNCTION release_fenced_named_bigint(text, bigint, text)"
    "FUNCTION acquire_fenced_named(text, text)" "FUNCTION acquire_fenced_named_bigint(text, bigint)"
    "FUNCTION acquire_fenced_all_named(text, text[])"
    "FUNCTION acquire_fenced_all_named(text, text[], interval)"
    "FUNCTION acquire_fenced_session_named(text, text)"
    "FUNCTION acquire_fenced_session_named_bigint(text, bigint)"
    "FUNCTION acquire_fenced_session_owned_named(text, text, text)"
    "FUNCTION acquire_fenced_session_owned_named_bigint(text, bigint, text)")
derived_granted_010=("EXECUTE ON FUNCTION acquire_fenced_session_owned(integer, integer, text)")

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
    named=$([ "$from" = 0.1.0 ] && echo acquire_fenced || echo acquire_fenced_named)
    sql "$upgraded" -c "CREATE EXTENSION fenced_lock VERSION '$from'" \
        -c "SELECT register_namespace('upgrade-ns', 77, 'made on $from')" \
        -c "SELECT fence_check('upgrade-resource', 42)" \
        -c "BEGIN" -c "SELECT acquire_fenced(77, g) FROM generate_series(1, 5) g" -c "COMMIT" >/dev/null
    # A lease held across the upgrade (0.2.0 has leases), taken with the new library on the
    # old schema: it works, without the lock-delay the schema cannot record yet.
    [ "$from" = 0.2.0 ] && sql "$upgraded" -c "SET fenced_lock.lease_lock_delay = '5s'" \
        -c "SELECT acquire_lease(77, 1, 'old-holder', '1 hour')" >/dev/null
    # The last token drawn on the old release (the latest of all: tokens rise).
    position=$(sql "$upgraded" -c "BEGIN" -c "SELECT $named('upgrade-ns', 'order:1')" -c "COMMIT")
    named_key_before=$(sql "$upgraded" -c "SELECT fenced_key('order:1')")
    privileges "$upgraded" REVOKE ALL FROM PUBLIC "${common_revoked[@]}"
    privileges "$upgraded" GRANT "" TO upgrade_auditor "${common_granted[@]}"
    [ "$from" = 0.1.0 ] && privileges "$upgraded" REVOKE ALL FROM PUBLIC "${revoked_010[@]}"
    sql "$upgraded" -c "ALTER EXTENSION fenced_lock UPDATE"
    sql "$fresh" -c "CREATE EXTENSION fenced_lock"
    privileges "$fresh" REVOKE ALL FROM PUBLIC "${common_revoked[@]}"
    privileges "$fresh" GRANT "" TO upgrade_auditor "${common_granted[@]}"
    # 0.3.0 has those forms itself, with the privileges they were created with.
    case $from in 0.1.0 | 0.2.0) privileges "$fresh" REVOKE ALL FROM PUBLIC "${derived_revoked[@]}" ;; esac
    if [ "$from" = 0.1.0 ]; then
        privileges "$fresh" REVOKE ALL FROM PUBLIC "${derived_revoked_010[@]}"
        privileges "$fresh" GRANT "" TO upgrade_auditor "${derived_granted_010[@]}"
    fi

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
    privileges "$upgraded" GRANT ALL TO PUBLIC "${common_revoked[@]}"
    privileges "$upgraded" REVOKE "" FROM upgrade_auditor "${common_granted[@]}"
    privileges "$upgraded" GRANT ALL TO PUBLIC "${derived_revoked[@]}"
    if [ "$from" = 0.1.0 ]; then
        privileges "$upgraded" GRANT ALL TO PUBLIC "${derived_revoked_010[@]}"
        privileges "$upgraded" REVOKE "" FROM upgrade_auditor "${derived_granted_010[@]}"
    fi
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
