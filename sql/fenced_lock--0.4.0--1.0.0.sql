-- fenced_lock 0.4.0 -> 1.0.0. Every SQL change since 0.4.0, so that an upgraded database
-- equals a fresh 1.0.0 install (pg_test/upgrade/catalog.sql compares them), privileges a DBA
-- granted or revoked included: objects are changed in place, never dropped and re-created.
\echo Use "ALTER EXTENSION fenced_lock UPDATE TO '1.0.0'" to load this file. \quit

-- The token floor is read for every value a token can take (0.4.0 ignored one of 19 digits:
-- a re-created extension started at the clock, below tokens resources kept, and the next
-- DROP lowered the floor); one that is not a token is refused (22023).
CREATE FUNCTION fenced_lock_kept_token_floor() RETURNS bigint
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kept text := (SELECT pg_catalog.substr(c, 25)
                    FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) c
                   WHERE s.setrole = 0
                     AND s.setdatabase = (SELECT oid FROM pg_catalog.pg_database
                                           WHERE datname = pg_catalog.current_database())
                     AND pg_catalog.starts_with(c, 'fenced_lock.token_floor='));
BEGIN
    IF kept IS NULL THEN
        RETURN 0;
    END IF;
    IF kept !~ '^[0-9]{1,19}$' OR kept::numeric > 9223372036854775807 THEN
        RAISE EXCEPTION 'this database''s fenced_lock.token_floor is not a token: "%"', kept
              USING ERRCODE = 'invalid_parameter_value',
                    DETAIL = 'The floor is the last token an earlier installation of fenced_lock '
                             'in this database issued; a new one starts above it. It must be a '
                             'whole number from 0 to 9223372036854775807.',
                    HINT = 'Set it to the highest token any installation in this database '
                           'issued (ALTER DATABASE ... SET fenced_lock.token_floor = ''N''), or '
                           'RESET it if none did.';
    END IF;
    RETURN kept::bigint;
END
$$;
REVOKE ALL ON FUNCTION fenced_lock_kept_token_floor() FROM PUBLIC;
COMMENT ON FUNCTION fenced_lock_kept_token_floor() IS
    'fenced_lock: the database''s fenced_lock.token_floor as a token (0 when unset); 22023 when '
    'it is not one.';

-- A database where 0.4.0 ignored its floor issues tokens above it from now on (setval retires
-- the shared allocator's block).
SELECT pg_catalog.setval('@extschema@.fencing_token_seq', fenced_lock_kept_token_floor())
 WHERE fenced_lock_kept_token_floor() > (SELECT last_value FROM @extschema@.fencing_token_seq);

CREATE OR REPLACE FUNCTION fenced_lock_keep_token_floor() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    token_sequence regclass := (SELECT c.oid FROM pg_catalog.pg_class c
                                 WHERE c.oid = pg_catalog.to_regclass('@extschema@.fencing_token_seq')
                                   AND c.relkind = 'S');
    issued bigint := pg_catalog.pg_sequence_last_value(token_sequence);
BEGIN
    -- A sequence detached and dropped (an installation being repaired) keeps no floor and
    -- stops no DROP. A kept floor that is not a token stops it (22023).
    IF issued IS NULL THEN
        RETURN;
    END IF;
    IF issued > @extschema@.fenced_lock_kept_token_floor() THEN
        EXECUTE pg_catalog.format('ALTER DATABASE %I SET fenced_lock.token_floor = %L',
                                  pg_catalog.current_database(), issued::text);
    END IF;
END
$$;

-- The event trigger fires under session_replication_role = replica too (a logical
-- replication worker, a restore with triggers disabled): 0.4.0 kept no floor there.
ALTER EVENT TRIGGER fenced_lock_keep_token_floor ENABLE ALWAYS;

-- 1.0's API (docs/api.md; docs/upgrading.md has every 0.4.0 call and its replacement): the
-- functions whose signature, meaning or name changed are dropped and created anew. A DBA's
-- privileges on each 0.4.0 function go to the 1.0 function that does what it did (kept here
-- until the new ones exist: only this transaction sees the setting).
SELECT pg_catalog.set_config('fenced_lock_upgrade.privileges', (
    SELECT COALESCE(pg_catalog.jsonb_object_agg(m.replacement, p.proacl::text[]), '{}')::text
      FROM (VALUES
        ('acquire_fenced(integer, integer, interval, boolean)', 'acquire_fenced(integer, integer)'),
        ('acquire_fenced_named(text, text, interval, boolean)', 'acquire_fenced_named(text, text)'),
        ('try_acquire_fenced(integer, integer, boolean)', 'try_acquire_fenced(integer, integer)'),
        ('try_acquire_fenced_named(text, text, boolean)', 'try_acquire_fenced_named(text, text)'),
        ('acquire_fenced_all(integer, integer[], interval)', 'acquire_fenced_all(integer, integer[])'),
        ('acquire_fenced_all_named(text, text[], interval)', 'acquire_fenced_all_named(text, text[])'),
        ('acquire_fenced_session(integer, integer, interval, text, boolean)', 'acquire_fenced_session(integer, integer)'),
        ('acquire_fenced_session_named(text, text, interval, text, boolean)', 'acquire_fenced_session_named(text, text)'),
        ('try_acquire_fenced_session(integer, integer, text, boolean)', 'try_acquire_fenced_session(integer, integer)'),
        ('try_acquire_fenced_session_named(text, text, text, boolean)', 'try_acquire_fenced_session_named(text, text)'),
        ('release_fenced(integer, integer, text)', 'release_fenced(integer, integer)'),
        ('release_fenced_named(text, text, text)', 'release_fenced_named(text, text)'),
        ('release_all_fenced(text)', 'release_all_fenced()'),
        ('current_fence(integer, integer, text)', 'current_fence(integer, integer)'),
        ('current_fence_named(text, text, text)', 'current_fence_named(text, text)'),
        ('acquire_permit(integer, integer, integer, interval)', 'acquire_fenced_permit(integer, integer, integer)'),
        ('acquire_permit_named(text, text, integer, interval)', 'acquire_fenced_permit_named(text, text, integer)'),
        ('try_acquire_permit(integer, integer, integer)', 'try_acquire_fenced_permit(integer, integer, integer)'),
        ('try_acquire_permit_named(text, text, integer)', 'try_acquire_fenced_permit_named(text, text, integer)'),
        ('acquire_permit_session(integer, integer, integer, interval, text)', 'acquire_fenced_permit_session(integer, integer, integer)'),
        ('acquire_permit_session_named(text, text, integer, interval, text)', 'acquire_fenced_permit_session_named(text, text, integer)'),
        ('try_acquire_permit_session(integer, integer, integer, text)', 'try_acquire_fenced_permit_session(integer, integer, integer)'),
        ('try_acquire_permit_session_named(text, text, integer, text)', 'try_acquire_fenced_permit_session_named(text, text, integer)'),
        ('release_permit(integer, integer, integer, text)', 'release_fenced_permit(integer, integer, integer)'),
        ('release_permit_named(text, text, integer, text)', 'release_fenced_permit_named(text, text, integer)'),
        ('acquire_lease(integer, integer, text, interval, interval)', 'acquire_lease(integer, integer, text, interval, interval)'),
        ('acquire_lease_named(text, text, text, interval, interval)', 'acquire_lease_named(text, text, text, interval, interval)'),
        ('try_acquire_lease(integer, integer, text, interval)', 'acquire_lease(integer, integer, text, interval)'),
        ('try_acquire_lease_named(text, text, text, interval)', 'acquire_lease_named(text, text, text, interval)'),
        ('acquire_lease_permit(integer, integer, integer, text, interval, interval)', 'acquire_lease_permit(integer, integer, integer, text, interval, interval)'),
        ('acquire_lease_permit_named(text, text, integer, text, interval, interval)', 'acquire_lease_permit_named(text, text, integer, text, interval, interval)'),
        ('try_acquire_lease_permit(integer, integer, integer, text, interval)', 'acquire_lease_permit(integer, integer, integer, text, interval)'),
        ('try_acquire_lease_permit_named(text, text, integer, text, interval)', 'acquire_lease_permit_named(text, text, integer, text, interval)'),
        ('fence_check(text, bigint)', 'fence_check_strict(text, bigint)'),
        ('fence_check_or_false(text, bigint)', 'fence_check(text, bigint)'),
        ('fenced_update(regclass, anyelement, bigint, jsonb, text, text)', 'fenced_update_strict(regclass, anyelement, bigint, jsonb, text, text)'),
        ('fenced_update_or_false(regclass, anyelement, bigint, jsonb, text, text)', 'fenced_update(regclass, anyelement, bigint, jsonb, text, text)'),
        ('fenced_update(regclass, text, bigint, jsonb, text, text)', 'fenced_update_strict(regclass, text, bigint, jsonb, text, text)'),
        ('fenced_update_or_false(regclass, text, bigint, jsonb, text, text)', 'fenced_update(regclass, text, bigint, jsonb, text, text)'),
        ('fenced_update(text, anyelement, bigint, jsonb, text, text)', 'fenced_update_strict(text, anyelement, bigint, jsonb, text, text)'),
        ('fenced_update_or_false(text, anyelement, bigint, jsonb, text, text)', 'fenced_update(text, anyelement, bigint, jsonb, text, text)'),
        ('fenced_update(text, text, bigint, jsonb, text, text)', 'fenced_update_strict(text, text, bigint, jsonb, text, text)'),
        ('fenced_update_or_false(text, text, bigint, jsonb, text, text)', 'fenced_update(text, text, bigint, jsonb, text, text)')
           ) AS m(replacement, replaced)
      JOIN pg_catalog.pg_proc p
        ON p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('@extschema@.' || m.replaced)
     WHERE p.proacl IS NOT NULL), true);

DROP FUNCTION fence_check_strict(text, bigint);
DROP FUNCTION fenced_update(regclass, anyelement, bigint, jsonb, text, text);
DROP FUNCTION fenced_update(regclass, text, bigint, jsonb, text, text);
DROP FUNCTION fenced_update(text, anyelement, bigint, jsonb, text, text);
DROP FUNCTION fenced_update(text, text, bigint, jsonb, text, text);
DROP FUNCTION fenced_update_strict(regclass, anyelement, bigint, jsonb, text, text);
DROP FUNCTION fenced_update_strict(regclass, text, bigint, jsonb, text, text);
DROP FUNCTION fenced_update_strict(text, anyelement, bigint, jsonb, text, text);
DROP FUNCTION fenced_update_strict(text, text, bigint, jsonb, text, text);
DROP FUNCTION acquire_fenced(integer, integer);
DROP FUNCTION acquire_fenced(integer, integer, interval);
DROP FUNCTION acquire_fenced_all(integer, integer[]);
DROP FUNCTION acquire_fenced_all(integer, integer[], interval);
DROP FUNCTION acquire_fenced_all_named(text, text[]);
DROP FUNCTION acquire_fenced_all_named(text, text[], interval);
DROP FUNCTION acquire_fenced_named(text, text);
DROP FUNCTION acquire_fenced_named(text, text, interval);
DROP FUNCTION acquire_fenced_named_bigint(text, bigint);
DROP FUNCTION acquire_fenced_named_bigint(text, bigint, interval);
DROP FUNCTION acquire_fenced_permit(integer, integer, integer);
DROP FUNCTION acquire_fenced_permit(integer, integer, integer, interval);
DROP FUNCTION acquire_fenced_permit_named(text, text, integer);
DROP FUNCTION acquire_fenced_permit_named(text, text, integer, interval);
DROP FUNCTION acquire_fenced_permit_named_bigint(text, bigint, integer);
DROP FUNCTION acquire_fenced_permit_named_bigint(text, bigint, integer, interval);
DROP FUNCTION acquire_fenced_permit_session(integer, integer, integer);
DROP FUNCTION acquire_fenced_permit_session(integer, integer, integer, interval);
DROP FUNCTION acquire_fenced_permit_session_named(text, text, integer);
DROP FUNCTION acquire_fenced_permit_session_named(text, text, integer, interval);
DROP FUNCTION acquire_fenced_permit_session_named_bigint(text, bigint, integer);
DROP FUNCTION acquire_fenced_permit_session_named_bigint(text, bigint, integer, interval);
DROP FUNCTION acquire_fenced_permit_session_owned(integer, integer, integer, text);
DROP FUNCTION acquire_fenced_permit_session_owned(integer, integer, integer, text, interval);
DROP FUNCTION acquire_fenced_permit_session_owned_named(text, text, integer, text);
DROP FUNCTION acquire_fenced_permit_session_owned_named(text, text, integer, text, interval);
DROP FUNCTION acquire_fenced_permit_session_owned_named_bigint(text, bigint, integer, text);
DROP FUNCTION acquire_fenced_permit_session_owned_named_bigint(text, bigint, integer, text, interval);
DROP FUNCTION acquire_fenced_session(integer, integer);
DROP FUNCTION acquire_fenced_session(integer, integer, interval);
DROP FUNCTION acquire_fenced_session_named(text, text);
DROP FUNCTION acquire_fenced_session_named(text, text, interval);
DROP FUNCTION acquire_fenced_session_named_bigint(text, bigint);
DROP FUNCTION acquire_fenced_session_named_bigint(text, bigint, interval);
DROP FUNCTION acquire_fenced_session_owned(integer, integer, text);
DROP FUNCTION acquire_fenced_session_owned(integer, integer, text, interval);
DROP FUNCTION acquire_fenced_session_owned_named(text, text, text);
DROP FUNCTION acquire_fenced_session_owned_named(text, text, text, interval);
DROP FUNCTION acquire_fenced_session_owned_named_bigint(text, bigint, text);
DROP FUNCTION acquire_fenced_session_owned_named_bigint(text, bigint, text, interval);
DROP FUNCTION acquire_fenced_shared(integer, integer);
DROP FUNCTION acquire_fenced_shared(integer, integer, interval);
DROP FUNCTION acquire_fenced_shared_named(text, text);
DROP FUNCTION acquire_fenced_shared_named(text, text, interval);
DROP FUNCTION acquire_fenced_shared_named_bigint(text, bigint);
DROP FUNCTION acquire_fenced_shared_named_bigint(text, bigint, interval);
DROP FUNCTION acquire_fenced_shared_session(integer, integer);
DROP FUNCTION acquire_fenced_shared_session(integer, integer, interval);
DROP FUNCTION acquire_fenced_shared_session_named(text, text);
DROP FUNCTION acquire_fenced_shared_session_named(text, text, interval);
DROP FUNCTION acquire_fenced_shared_session_named_bigint(text, bigint);
DROP FUNCTION acquire_fenced_shared_session_named_bigint(text, bigint, interval);
DROP FUNCTION acquire_fenced_shared_session_owned(integer, integer, text);
DROP FUNCTION acquire_fenced_shared_session_owned(integer, integer, text, interval);
DROP FUNCTION acquire_fenced_shared_session_owned_named(text, text, text);
DROP FUNCTION acquire_fenced_shared_session_owned_named(text, text, text, interval);
DROP FUNCTION acquire_fenced_shared_session_owned_named_bigint(text, bigint, text);
DROP FUNCTION acquire_fenced_shared_session_owned_named_bigint(text, bigint, text, interval);
DROP FUNCTION acquire_lease(integer, integer, text, interval);
DROP FUNCTION acquire_lease(integer, integer, text, interval, interval);
DROP FUNCTION acquire_lease_named(text, text, text, interval);
DROP FUNCTION acquire_lease_named(text, text, text, interval, interval);
DROP FUNCTION acquire_lease_named_bigint(text, bigint, text, interval);
DROP FUNCTION acquire_lease_named_bigint(text, bigint, text, interval, interval);
DROP FUNCTION acquire_lease_permit(integer, integer, integer, text, interval);
DROP FUNCTION acquire_lease_permit(integer, integer, integer, text, interval, interval);
DROP FUNCTION acquire_lease_permit_named(text, text, integer, text, interval);
DROP FUNCTION acquire_lease_permit_named(text, text, integer, text, interval, interval);
DROP FUNCTION acquire_lease_permit_named_bigint(text, bigint, integer, text, interval);
DROP FUNCTION acquire_lease_permit_named_bigint(text, bigint, integer, text, interval, interval);
DROP FUNCTION become_leader(integer, integer);
DROP FUNCTION become_leader(integer, integer, text);
DROP FUNCTION become_leader_named(text, text);
DROP FUNCTION become_leader_named(text, text, text);
DROP FUNCTION become_leader_named_bigint(text, bigint);
DROP FUNCTION become_leader_named_bigint(text, bigint, text);
DROP FUNCTION current_fence(integer, integer);
DROP FUNCTION current_fence(integer, integer, text);
DROP FUNCTION current_fence_named(text, text);
DROP FUNCTION current_fence_named(text, text, text);
DROP FUNCTION current_fence_named_bigint(text, bigint);
DROP FUNCTION current_fence_named_bigint(text, bigint, text);
DROP FUNCTION current_leader(integer, integer);
DROP FUNCTION current_leader_named(text, text);
DROP FUNCTION current_leader_named_bigint(text, bigint);
DROP FUNCTION fence_check(text, bigint);
DROP FUNCTION force_release_named_bigint(text, bigint);
DROP FUNCTION release_all_fenced();
DROP FUNCTION release_all_fenced(text);
DROP FUNCTION release_fenced(integer, integer);
DROP FUNCTION release_fenced(integer, integer, text);
DROP FUNCTION release_fenced_named(text, text);
DROP FUNCTION release_fenced_named(text, text, text);
DROP FUNCTION release_fenced_named_bigint(text, bigint);
DROP FUNCTION release_fenced_named_bigint(text, bigint, text);
DROP FUNCTION release_fenced_permit(integer, integer, integer);
DROP FUNCTION release_fenced_permit(integer, integer, integer, text);
DROP FUNCTION release_fenced_permit_named(text, text, integer);
DROP FUNCTION release_fenced_permit_named(text, text, integer, text);
DROP FUNCTION release_fenced_permit_named_bigint(text, bigint, integer);
DROP FUNCTION release_fenced_permit_named_bigint(text, bigint, integer, text);
DROP FUNCTION release_lease_named_bigint(text, bigint, bigint);
DROP FUNCTION renew_lease_named_bigint(text, bigint, bigint, interval);
DROP FUNCTION try_acquire_fenced(integer, integer);
DROP FUNCTION try_acquire_fenced_named(text, text);
DROP FUNCTION try_acquire_fenced_named_bigint(text, bigint);
DROP FUNCTION try_acquire_fenced_permit(integer, integer, integer);
DROP FUNCTION try_acquire_fenced_permit_named(text, text, integer);
DROP FUNCTION try_acquire_fenced_permit_named_bigint(text, bigint, integer);
DROP FUNCTION try_acquire_fenced_permit_session(integer, integer, integer);
DROP FUNCTION try_acquire_fenced_permit_session(integer, integer, integer, text);
DROP FUNCTION try_acquire_fenced_permit_session_named(text, text, integer);
DROP FUNCTION try_acquire_fenced_permit_session_named(text, text, integer, text);
DROP FUNCTION try_acquire_fenced_permit_session_named_bigint(text, bigint, integer);
DROP FUNCTION try_acquire_fenced_permit_session_named_bigint(text, bigint, integer, text);
DROP FUNCTION try_acquire_fenced_session(integer, integer);
DROP FUNCTION try_acquire_fenced_session(integer, integer, text);
DROP FUNCTION try_acquire_fenced_session_named(text, text);
DROP FUNCTION try_acquire_fenced_session_named(text, text, text);
DROP FUNCTION try_acquire_fenced_session_named_bigint(text, bigint);
DROP FUNCTION try_acquire_fenced_session_named_bigint(text, bigint, text);
DROP FUNCTION try_acquire_fenced_shared(integer, integer);
DROP FUNCTION try_acquire_fenced_shared_named(text, text);
DROP FUNCTION try_acquire_fenced_shared_named_bigint(text, bigint);
DROP FUNCTION try_acquire_fenced_shared_session(integer, integer);
DROP FUNCTION try_acquire_fenced_shared_session(integer, integer, text);
DROP FUNCTION try_acquire_fenced_shared_session_named(text, text);
DROP FUNCTION try_acquire_fenced_shared_session_named(text, text, text);
DROP FUNCTION try_acquire_fenced_shared_session_named_bigint(text, bigint);
DROP FUNCTION try_acquire_fenced_shared_session_named_bigint(text, bigint, text);
DROP FUNCTION fenced_lock_holder(integer, integer);
DROP FUNCTION fenced_lock_holder_named(text, text);
DROP FUNCTION fenced_lock_holder_named_bigint(text, bigint);

-- The functions behind the views move to a schema of their own (not the API).
CREATE SCHEMA fenced_lock_internal;
GRANT USAGE ON SCHEMA fenced_lock_internal TO PUBLIC;
ALTER FUNCTION fenced_lock_rows() SET SCHEMA fenced_lock_internal;
ALTER FUNCTION fenced_lock_stats_rows() SET SCHEMA fenced_lock_internal;
ALTER FUNCTION fenced_lock_refusal_rows() SET SCHEMA fenced_lock_internal;
ALTER FUNCTION fenced_lease_available_at(timestamptz, interval) SET SCHEMA fenced_lock_internal;
ALTER FUNCTION fenced_lock_grants() SET SCHEMA fenced_lock_internal;
ALTER FUNCTION fenced_lock_grants_available() SET SCHEMA fenced_lock_internal;

-- The counter views' columns, from the one list of counters (src/stats/mod.rs): 0.4.0's views
-- read the same columns, and stay.
CREATE  FUNCTION fenced_lock_internal."fenced_lock_columns"(
	"view" TEXT /* & str */
) RETURNS TEXT /* String */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fenced_lock_columns_wrapper';
COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_columns(text) IS
    'fenced_lock: the counter columns of fenced_lock_stats or fenced_lock_refusals, as the '
    'view''s select list: the scripts build the views from it.';
REVOKE EXECUTE ON FUNCTION fenced_lock_internal.fenced_lock_columns(text) FROM PUBLIC;

CREATE  FUNCTION "acquire_fenced"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"timeout" interval DEFAULT NULL, /* Option < Interval > */
	"shared" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_wrapper';

CREATE  FUNCTION "acquire_fenced_all"(
	"ns" INT, /* Option < i32 > */
	"ids" INT[], /* :: std :: option :: Option < Array < i32 > > */
	"timeout" interval DEFAULT NULL /* Option < Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_all_wrapper';

CREATE  FUNCTION "acquire_fenced_all_named"(
	"namespace" TEXT, /* Option < & str > */
	"keys" TEXT[], /* :: std :: option :: Option < Array < & str > > */
	"timeout" interval DEFAULT NULL /* Option < Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_all_named_wrapper';

CREATE  FUNCTION "acquire_fenced_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"timeout" interval DEFAULT NULL, /* Option < Interval > */
	"shared" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_named_wrapper';

CREATE  FUNCTION "acquire_fenced_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"timeout" interval DEFAULT NULL, /* Option < Interval > */
	"owner" TEXT DEFAULT NULL, /* Option < & str > */
	"shared" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_wrapper';

CREATE  FUNCTION "acquire_fenced_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"timeout" interval DEFAULT NULL, /* Option < Interval > */
	"owner" TEXT DEFAULT NULL, /* Option < & str > */
	"shared" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_named_wrapper';

CREATE  FUNCTION "acquire_lease"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"timeout" interval DEFAULT NULL /* Option < Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_wrapper';

CREATE  FUNCTION "acquire_lease_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"timeout" interval DEFAULT NULL /* Option < Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_named_wrapper';

CREATE  FUNCTION "acquire_lease_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"timeout" interval DEFAULT NULL /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_permit_wrapper';

CREATE  FUNCTION "acquire_lease_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"timeout" interval DEFAULT NULL /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_permit_named_wrapper';

CREATE  FUNCTION "acquire_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval DEFAULT NULL /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_permit_wrapper';

CREATE  FUNCTION "acquire_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval DEFAULT NULL /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_permit_named_wrapper';

CREATE  FUNCTION "acquire_permit_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval DEFAULT NULL, /* Option < Interval > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_permit_session_wrapper';

CREATE  FUNCTION "acquire_permit_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval DEFAULT NULL, /* Option < Interval > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_permit_session_named_wrapper';

CREATE  FUNCTION "current_fence"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_fence_wrapper';

CREATE  FUNCTION "current_fence_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_fence_named_wrapper';

CREATE  FUNCTION "release_all_fenced"(
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_all_fenced_wrapper';

CREATE  FUNCTION "release_fenced"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_wrapper';

CREATE  FUNCTION "release_fenced_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_named_wrapper';

CREATE  FUNCTION "release_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"slot" INT, /* Option < i32 > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_permit_wrapper';

CREATE  FUNCTION "release_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"slot" INT, /* Option < i32 > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_permit_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"shared" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_wrapper';

CREATE  FUNCTION "try_acquire_fenced_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"shared" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT DEFAULT NULL, /* Option < & str > */
	"shared" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_session_wrapper';

CREATE  FUNCTION "try_acquire_fenced_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT DEFAULT NULL, /* Option < & str > */
	"shared" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_session_named_wrapper';

CREATE  FUNCTION "try_acquire_lease"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval /* Option < Interval > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_lease_wrapper';

CREATE  FUNCTION "try_acquire_lease_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval /* Option < Interval > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_lease_named_wrapper';

CREATE  FUNCTION "try_acquire_lease_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_lease_permit_wrapper';

CREATE  FUNCTION "try_acquire_lease_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_lease_permit_named_wrapper';

CREATE  FUNCTION "try_acquire_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_permit_wrapper';

CREATE  FUNCTION "try_acquire_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_permit_named_wrapper';

CREATE  FUNCTION "try_acquire_permit_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_permit_session_wrapper';

CREATE  FUNCTION "try_acquire_permit_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_permit_session_named_wrapper';


CREATE FUNCTION fence_check(resource text, token bigint) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = @extschema@, pg_temp
    AS 'MODULE_PATHNAME', 'fence_check_strict';

CREATE FUNCTION fence_check_or_false(resource text, token bigint) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = @extschema@, pg_temp
    AS 'MODULE_PATHNAME', 'fence_check_wrapper';

-- fenced_update: the write and the check in one statement, SF001 when superseded. The forms
-- with a table name and/or an id given as text are what untyped driver parameters resolve to
-- (unknown prefers text): the name is looked up as regclass input would; a text id is read as
-- the key column's type. So no driver needs a cast for int, bigint, uuid or text keys, nor a
-- regclass type of its own. Typed ids of any type take the anyelement forms.
CREATE FUNCTION fenced_update(
    target regclass,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update(
    target regclass,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update(
    target text,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update(
    target text,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

-- fenced_update_or_false: the same four forms, returning false when superseded.
CREATE FUNCTION fenced_update_or_false(
    target regclass,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

CREATE FUNCTION fenced_update_or_false(
    target regclass,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

CREATE FUNCTION fenced_update_or_false(
    target text,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

CREATE FUNCTION fenced_update_or_false(
    target text,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

REVOKE EXECUTE ON FUNCTION fence_check(text, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fence_check_or_false(text, bigint) FROM PUBLIC;
COMMENT ON TABLE fence_ledger IS
    'fenced_lock: highest fencing token accepted per resource name, written by fence_check '
    'and fence_check_or_false.';

-- The kept privileges, on the replacements.
DO $privileges$
DECLARE
    kept record;
    item record;
BEGIN
    FOR kept IN SELECT key AS replacement, value AS acl
                  FROM pg_catalog.jsonb_each(pg_catalog.current_setting(
                           'fenced_lock_upgrade.privileges')::jsonb)
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION @extschema@.%s FROM PUBLIC',
                                  kept.replacement);
        FOR item IN SELECT a.grantee, a.is_grantable
                      FROM pg_catalog.aclexplode(ARRAY(
                               SELECT pg_catalog.jsonb_array_elements_text(kept.acl))::pg_catalog.aclitem[]) a
                     WHERE a.grantee OPERATOR(pg_catalog.<>) a.grantor
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.%s TO %s%s',
                kept.replacement,
                CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
                CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$privileges$;

COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_grants() IS
    'The live fenced grants of this database (pid, ns, id, token, scope, acquired_at, key: the '
    'text of a named key, owner: the owner of a session grant; each their first 64 bytes) from '
    'the shared grants table; empty unless fenced_lock is in shared_preload_libraries.';

COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_rows() IS
    'The rows of fenced_locks without the session''s columns: every two-int4 advisory lock of '
    'this database and every permit, held or awaited, with its fenced grant, mode and slot; one '
    'pass over the lock table and the grants table.';

COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_grants_available() IS
    'Whether this server keeps the shared grants table (fenced_lock is preloaded).';

COMMENT ON SCHEMA fenced_lock_internal IS
    'fenced_lock: the functions behind its views (not its API; docs/api.md).';

COMMENT ON FUNCTION acquire_fenced(integer, integer, interval, boolean) IS
    'Wait for the transaction-scoped advisory lock on (ns, id) (pg_advisory_xact_lock''s; with '
    'shared, pg_advisory_xact_lock_shared''s) and return a new fencing token, larger than every '
    'token granted before; at most timeout (NULL: no limit), then SQLSTATE 55P03 naming the key '
    'and its holders. The key held by this transaction: the same token.';

COMMENT ON FUNCTION try_acquire_fenced(integer, integer, boolean) IS
    'Take the transaction-scoped advisory lock on (ns, id) without waiting: a new fencing token, '
    'or NULL when the key is busy.';

COMMENT ON FUNCTION acquire_fenced_all(integer, integer[], interval) IS
    'Wait for the transaction-scoped advisory locks on (ns, id) for every id (each once), taken '
    'in ascending order so that overlapping sets never deadlock, and return one new fencing '
    'token for all of them; the whole call waits at most timeout (NULL: no limit), then 55P03.';

COMMENT ON FUNCTION try_acquire_fenced_all(integer, integer[]) IS
    'Take the transaction-scoped advisory locks on (ns, id) for every id without waiting, all '
    'or none: one new fencing token, or NULL (nothing taken) when any is busy.';

COMMENT ON FUNCTION acquire_fenced_all_named(text, text[], interval) IS
    'acquire_fenced_all for named keys of a registered namespace: one token for all of them.';

COMMENT ON FUNCTION try_acquire_fenced_all_named(text, text[]) IS
    'try_acquire_fenced_all for named keys of a registered namespace: all or none.';

COMMENT ON FUNCTION acquire_fenced_session(integer, integer, interval, text, boolean) IS
    'Wait for the session-level advisory lock on (ns, id) (pg_advisory_lock''s; with shared, '
    'pg_advisory_lock_shared''s) for owner (NULL: none) and return a new fencing token; held '
    'until release_fenced or the session ends. At most timeout (NULL: no limit), then 55P03. '
    'Held by this session for the same owner: the same token; for another (or none): 55000.';

COMMENT ON FUNCTION try_acquire_fenced_session(integer, integer, text, boolean) IS
    'Take the session-level advisory lock on (ns, id) for owner without waiting, as a leader '
    'does: a new fencing token (the term), the same one when this session holds it for owner, '
    'or NULL when another session holds it (or this one for another owner, or none).';

COMMENT ON FUNCTION release_fenced(integer, integer, text) IS
    'Release this session''s session-scoped fenced lock on (ns, id) taken for owner (NULL: '
    'none) and NOTIFY fenced_lock, ''ns:id''. False, with a WARNING, when not held so.';

COMMENT ON FUNCTION release_all_fenced(text) IS
    'Release every session-scoped fenced lock of this session taken for owner (NULL: without '
    'one), with a NOTIFY each; how many.';

COMMENT ON FUNCTION current_fence(integer, integer, text) IS
    'The token of the fenced lock this session holds on (ns, id) at transaction scope, or at '
    'session scope taken for owner (NULL: without one); else NULL.';

COMMENT ON FUNCTION acquire_permit(integer, integer, integer, interval) IS
    'Wait, in arrival order, for one of the permits slots of the fenced semaphore (ns, id) for '
    'this transaction: one row (slot, token), the token new and larger than every token granted '
    'before; at most timeout (NULL: no limit), then 55P03. Asked again: the same row.';

COMMENT ON FUNCTION try_acquire_permit(integer, integer, integer) IS
    'Take a permit of (ns, id) for this transaction without waiting: one row (slot, token), or '
    'no row when none is free or others wait in line.';

COMMENT ON FUNCTION acquire_permit_session(integer, integer, integer, interval, text) IS
    'acquire_permit for this session, for owner (NULL: none): held until release_permit or the '
    'session ends; only that owner gets it back or releases it.';

COMMENT ON FUNCTION try_acquire_permit_session(integer, integer, integer, text) IS
    'try_acquire_permit for this session, for owner: one row (slot, token), or none.';

COMMENT ON FUNCTION release_permit(integer, integer, integer, text) IS
    'Release this session''s permit slot of (ns, id) taken for owner (NULL: none): true, or '
    'false with a WARNING when not held so. Wakes the key''s line.';

COMMENT ON FUNCTION acquire_lease(integer, integer, text, interval, interval) IS
    'The lease on (ns, id) for owner, for ttl on the database''s clock: a new token (larger than '
    'every earlier one) once the key is free or expired, the same token with the TTL extended '
    'when owner holds it; waits in arrival order at most timeout (NULL: no limit), then 55P03. '
    'Leases are not advisory locks.';

COMMENT ON FUNCTION try_acquire_lease(integer, integer, text, interval) IS
    'acquire_lease without waiting: the token, or NULL when another owner holds the key.';

COMMENT ON FUNCTION acquire_lease_permit(integer, integer, integer, text, interval, interval) IS
    'A permit of the lease semaphore (ns, id) of permits slots for owner, for ttl: one row (slot, '
    'token), the same row with the TTL extended when owner holds one; waits as acquire_lease '
    'does. Renewed and released by token (renew_lease, release_lease).';

COMMENT ON FUNCTION try_acquire_lease_permit(integer, integer, integer, text, interval) IS
    'acquire_lease_permit without waiting: one row (slot, token), or no row when none is free.';

COMMENT ON FUNCTION renew_lease(integer, integer, bigint, interval) IS
    'Extend the lease held with token to ttl from now: the new expiry, or NULL when the lease is '
    'lost (taken over after expiry, released, never held with token, or by another role).';

COMMENT ON FUNCTION release_lease(integer, integer, bigint) IS
    'Release the lease held with token and wake waiting acquires: true, or false when no lease '
    'is held with token by this role.';

COMMENT ON FUNCTION fenced_update(regclass, anyelement, bigint, jsonb, text, text) IS
    'Conditional write for a fenced holder: UPDATE target SET <changes>, <fence_column> = token '
    'WHERE <key_column> = id AND <fence_column> <= token; SQLSTATE SF001 when the row carries a '
    'higher token (the caller was superseded); P0002 when there is no such row.';

COMMENT ON FUNCTION fenced_update(regclass, text, bigint, jsonb, text, text) IS
    'fenced_update with a text id, read as the key column''s type: what an untyped driver '
    'parameter resolves to, so int, bigint, uuid and text keys need no cast.';

COMMENT ON FUNCTION fenced_update(text, anyelement, bigint, jsonb, text, text) IS
    'fenced_update with the table given by name (looked up through search_path): what an '
    'untyped driver parameter resolves to.';

COMMENT ON FUNCTION fenced_update(text, text, bigint, jsonb, text, text) IS
    'fenced_update with the table given by name and a text id: every parameter untyped, as '
    'asyncpg, node-postgres and tokio-postgres send them.';

COMMENT ON FUNCTION fenced_update_or_false(regclass, anyelement, bigint, jsonb, text, text) IS
    'fenced_update that returns false when the row carries a higher token instead of raising '
    'SF001, true when written: for SQL that branches on it.';

COMMENT ON FUNCTION fenced_update_or_false(regclass, text, bigint, jsonb, text, text) IS
    'fenced_update_or_false with a text id, read as the key column''s type.';

COMMENT ON FUNCTION fenced_update_or_false(text, anyelement, bigint, jsonb, text, text) IS
    'fenced_update_or_false with the table given by name (looked up through search_path).';

COMMENT ON FUNCTION fenced_update_or_false(text, text, bigint, jsonb, text, text) IS
    'fenced_update_or_false with the table given by name and a text id: every parameter untyped.';

COMMENT ON FUNCTION new_fencing_token() IS
    'A fencing token from the same allocator as every grant''s, without taking any lock: only '
    'safe under a lock that already orders the holders (a row claimed FOR UPDATE SKIP LOCKED).';

COMMENT ON FUNCTION enforce_fence() IS
    'Trigger function: BEFORE UPDATE ... FOR EACH ROW EXECUTE FUNCTION enforce_fence(''fence'') '
    'refuses, with SQLSTATE SF001, any UPDATE that lowers the fence column or sets it to NULL.';

COMMENT ON FUNCTION fence_check(text, bigint) IS
    'Fence ledger for resources outside the database: record token for resource when it is at '
    'least the highest token accepted so far (or the resource is new), else SQLSTATE SF001.';

COMMENT ON FUNCTION fence_check_or_false(text, bigint) IS
    'fence_check that returns false for a stale token instead of raising SF001, true when '
    'recorded.';

COMMENT ON FUNCTION fenced_key(text) IS
    'The int4 a text key stands for in a fenced lock key: 32-bit FNV-1a of its UTF-8 bytes, read '
    'as a signed int4. Stable across platforms and versions; a collision only makes two keys '
    'contend, it never lets two holders in.';

COMMENT ON FUNCTION register_namespace(text, integer, text) IS
    'Register a namespace name for the first int4 of fenced lock keys and return its id (the '
    'lowest free positive id when ns is NULL). Same name and id again: no-op. A name or id taken '
    'by another entry: SQLSTATE 23505.';

COMMENT ON FUNCTION force_release(integer, integer) IS
    'Terminate the other backends holding (ns, id), the only way to free another session''s '
    'lock, and return how many. Needs the rights of pg_terminate_backend. The next holder gets '
    'a larger token, so the terminated holder''s late writes are refused at fenced resources.';

-- Every key-taking function F(ns, id, ...) has a named form under a name of its own (an
-- untyped driver call must never pick another key): F_named(namespace text, key text, ...),
-- for the key (registered id of namespace, fenced_key(key)). Their comments say so.
-- (acquire_fenced_all_named and its try form take many keys: their comments are above.)
DO $comment_named_forms$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.oid::pg_catalog.regprocedure AS signature,
               pg_catalog.regexp_replace(p.proname, '_named$', '') || '('
                   || pg_catalog.array_to_string(ARRAY['ns', 'id'] || p.proargnames[3:], ', ')
                   || ')' AS pair_form
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d
            ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
           AND d.deptype = 'e'
          JOIN pg_catalog.pg_extension e
            ON d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid = e.oid AND e.extname = 'fenced_lock'
         WHERE p.proname ~ '_named$'
           -- Not the key-set forms (keys text[]): their comments are their own.
           AND p.proargtypes[1] <> 'pg_catalog.text[]'::pg_catalog.regtype
    LOOP
        EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', f.signature,
            pg_catalog.format('%s for the key (registered id of namespace, fenced_key(key)).',
                              f.pair_form));
    END LOOP;
END
$comment_named_forms$;

COMMENT ON VIEW fenced_lock_stats IS
    'fenced_lock: cumulative counters per database and namespace since stats_reset (needs '
    'preloading): acquisitions at once and after a wait, wait time (ms), busy tries, timeouts, '
    'deadlocks, tokens, session grants, leader terms (exclusive session grants), leases, force '
    'releases, failover skips and token advances.';

-- The initial privileges of every member (pg_init_privs) become those a fresh install's
-- scripts set: the privileges carried over above are a DBA's, which pg_dump writes as changes.
DO $initial_privileges$
DECLARE
    extension_oid pg_catalog.oid := (SELECT e.oid FROM pg_catalog.pg_extension e
                                      WHERE e.extname OPERATOR(pg_catalog.=) 'fenced_lock');
BEGIN
    DELETE FROM pg_catalog.pg_init_privs i
     USING pg_catalog.pg_depend d
     WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.=) extension_oid
       AND d.deptype OPERATOR(pg_catalog.=) 'e'
       AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND i.objoid OPERATOR(pg_catalog.=) d.objid
       AND i.privtype OPERATOR(pg_catalog.=) 'e';
    INSERT INTO pg_catalog.pg_init_privs (objoid, classoid, objsubid, privtype, initprivs)
    SELECT p.oid, 'pg_catalog.pg_proc'::pg_catalog.regclass, 0, 'e',
           ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
      FROM (VALUES ('@extschema@.fence_check(text, bigint)'),
                   ('@extschema@.fence_check_or_false(text, bigint)'),
                   ('@extschema@.advance_fencing_tokens(bigint)'),
                   ('@extschema@.fenced_lock_stats_reset()'),
                   ('@extschema@.fenced_lock_kept_token_floor()'),
                   ('@extschema@.fenced_lock_keep_token_floor()'),
                   ('fenced_lock_internal.fenced_lock_columns(text)')
           ) AS f(signature)
      JOIN pg_catalog.pg_proc p
        ON p.oid OPERATOR(pg_catalog.=) f.signature::pg_catalog.regprocedure;
END
$initial_privileges$;
