-- fenced_lock 0.1.0 -> 0.2.0. Every SQL change after 0.1.0, one comment each; a database
-- upgraded with this script equals a fresh 0.2.0 install (pg_test/upgrade checks it).
\echo Use "ALTER EXTENSION fenced_lock UPDATE TO '0.2.0'" to load this file. \quit

-- The privileges a DBA granted or revoked on the objects this script drops and creates again
-- (and on the 0.1.0 functions whose new forms replace or extend them), kept for the end of the
-- script (fenced_lock_upgrade.*, until the transaction ends), where they are given back.
SELECT pg_catalog.set_config('fenced_lock_upgrade.' || saved.name,
                             COALESCE(saved.acl::text, ''), true)
  FROM (VALUES
    ('fenced_locks', (SELECT c.relacl FROM pg_catalog.pg_class c
                       WHERE c.oid = '@extschema@.fenced_locks'::pg_catalog.regclass)),
    ('fenced_lock_grants', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.fenced_lock_grants()'::pg_catalog.regprocedure)),
    ('current_leader', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.current_leader(integer, integer)'::pg_catalog.regprocedure)),
    ('fenced_lock_holder', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.fenced_lock_holder(integer, integer)'::pg_catalog.regprocedure)),
    ('acquire_fenced_text', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.acquire_fenced(text, text)'::pg_catalog.regprocedure)),
    ('acquire_fenced_text_timeout', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.acquire_fenced(text, text, interval)'::pg_catalog.regprocedure)),
    ('try_acquire_fenced_text', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.try_acquire_fenced(text, text)'::pg_catalog.regprocedure)),
    ('acquire_fenced_session_text', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.acquire_fenced_session(text, text)'::pg_catalog.regprocedure)),
    ('acquire_fenced_session_text_timeout', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.acquire_fenced_session(text, text, interval)'::pg_catalog.regprocedure)),
    ('try_acquire_fenced_session_text', (SELECT p.proacl FROM pg_catalog.pg_proc p
        WHERE p.oid = '@extschema@.try_acquire_fenced_session(text, text)'::pg_catalog.regprocedure))
  ) AS saved(name, acl);

-- fenced_update is a bare C function now, so that errors raised by its UPDATE keep their
-- SQLSTATE (SF001 from enforce_fence, a domain's custom code); same signature and defaults.
CREATE OR REPLACE FUNCTION @extschema@.fenced_update(
    target regclass,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

-- Only roles the owner allows may advance the fence ledger.
REVOKE EXECUTE ON FUNCTION @extschema@.fence_check(text, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.fence_check_strict(text, bigint) FROM PUBLIC;

-- Named keys get names of their own: F_named(namespace text, key text, ...) and
-- F_named_bigint(namespace text, key bigint, ...). An untyped driver call of F(ns, id) picked
-- 0.1.0's F(text, text) overload (unknown prefers text) and locked another key.
DROP FUNCTION @extschema@.acquire_fenced(text, text);
DROP FUNCTION @extschema@.acquire_fenced(text, text, interval);
DROP FUNCTION @extschema@.try_acquire_fenced(text, text);
DROP FUNCTION @extschema@.acquire_fenced_session(text, text);
DROP FUNCTION @extschema@.acquire_fenced_session(text, text, interval);
DROP FUNCTION @extschema@.try_acquire_fenced_session(text, text);

CREATE  FUNCTION "acquire_fenced_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_named_wrapper';

CREATE  FUNCTION "acquire_fenced_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_named_within_wrapper';

CREATE  FUNCTION "acquire_fenced_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_named_bigint_within_wrapper';

CREATE  FUNCTION "try_acquire_fenced_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_named_wrapper';

CREATE  FUNCTION "acquire_fenced_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_named_within_wrapper';

CREATE  FUNCTION "acquire_fenced_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_named_bigint_within_wrapper';

CREATE  FUNCTION "try_acquire_fenced_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_session_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_session_named_bigint_wrapper';

CREATE  FUNCTION "become_leader_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'become_leader_named_wrapper';

CREATE  FUNCTION "become_leader_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'become_leader_named_bigint_wrapper';

CREATE  FUNCTION "release_fenced_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_named_wrapper';

CREATE  FUNCTION "release_fenced_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_named_bigint_wrapper';

CREATE  FUNCTION "current_fence_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_fence_named_wrapper';

CREATE  FUNCTION "current_fence_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_fence_named_bigint_wrapper';

CREATE  FUNCTION "current_leader_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS TABLE (
	"pid" INT,  /* i32 */
	"application_name" TEXT,  /* Option < String > */
	"client_addr" inet,  /* Option < pgrx :: Inet > */
	"term" bigint,  /* Option < i64 > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"owner" TEXT  /* Option < String > */
)
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_leader_named_wrapper';

CREATE  FUNCTION "current_leader_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS TABLE (
	"pid" INT,  /* i32 */
	"application_name" TEXT,  /* Option < String > */
	"client_addr" inet,  /* Option < pgrx :: Inet > */
	"term" bigint,  /* Option < i64 > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"owner" TEXT  /* Option < String > */
)
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_leader_named_bigint_wrapper';

CREATE  FUNCTION "force_release_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'force_release_named_wrapper';

CREATE  FUNCTION "force_release_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'force_release_named_bigint_wrapper';

-- fenced_update with a table name and/or an id given as text (untyped driver parameters):
-- the name looked up as regclass input would, the id read as the key column's type.
CREATE FUNCTION @extschema@.fenced_update(
    target regclass,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

CREATE FUNCTION @extschema@.fenced_update(
    target text,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

CREATE FUNCTION @extschema@.fenced_update(
    target text,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

COMMENT ON FUNCTION fenced_update(regclass, text, bigint, jsonb, text, text) IS
    'fenced_update with a text id, read as the key column''s type: what an untyped driver '
    'parameter resolves to, so int, bigint, uuid and text keys need no cast.';
COMMENT ON FUNCTION fenced_update(text, anyelement, bigint, jsonb, text, text) IS
    'fenced_update with the table given by name (looked up through search_path): what an '
    'untyped driver parameter resolves to.';
COMMENT ON FUNCTION fenced_update(text, text, bigint, jsonb, text, text) IS
    'fenced_update with the table given by name and a text id: every parameter untyped, as '
    'asyncpg, node-postgres and tokio-postgres send them.';

-- Session grants remember the owner they were taken for (a client-chosen id), and go back only
-- to it: behind a transaction-mode pooler a server session serves many clients. Owner forms of
-- the session functions; current_leader and fenced_locks (below) show the owner.
CREATE  FUNCTION "acquire_fenced_session_owned"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_owned_wrapper';
CREATE  FUNCTION "acquire_fenced_session_owned"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_owned_within_wrapper';
CREATE  FUNCTION "acquire_fenced_session_owned_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_owned_named_wrapper';
CREATE  FUNCTION "acquire_fenced_session_owned_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_owned_named_within_wrapper';
CREATE  FUNCTION "acquire_fenced_session_owned_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_owned_named_bigint_wrapper';
CREATE  FUNCTION "acquire_fenced_session_owned_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_session_owned_named_bigint_within_wrapper';
CREATE  FUNCTION "become_leader"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'become_leader_owner_wrapper';
CREATE  FUNCTION "become_leader_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'become_leader_owner_named_wrapper';
CREATE  FUNCTION "become_leader_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'become_leader_owner_named_bigint_wrapper';
CREATE  FUNCTION "release_fenced"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_owner_wrapper';
CREATE  FUNCTION "release_fenced_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_owner_named_wrapper';
CREATE  FUNCTION "release_fenced_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_owner_named_bigint_wrapper';
CREATE  FUNCTION "try_acquire_fenced_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_session_owner_wrapper';
CREATE  FUNCTION "try_acquire_fenced_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_session_owner_named_wrapper';
CREATE  FUNCTION "try_acquire_fenced_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_session_owner_named_bigint_wrapper';

DROP FUNCTION @extschema@.current_leader(integer, integer);
CREATE  FUNCTION "current_leader"(
	"ns" INT, /* Option < i32 > */
	"id" INT /* Option < i32 > */
) RETURNS TABLE (
	"pid" INT,  /* i32 */
	"application_name" TEXT,  /* Option < String > */
	"client_addr" inet,  /* Option < pgrx :: Inet > */
	"term" bigint,  /* Option < i64 > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"owner" TEXT  /* Option < String > */
)
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_leader_wrapper';

-- Table-backed leases: an owner, a TTL on the database's clock, renew and release by token;
-- they work through any pooler.
-- Table-backed leases (src/leases.rs): one row per key ever leased; owner NULL once released.
-- Rows are kept so that a new holder's token, drawn under the row's lock, is always above the
-- last holder's. holder is the role that acquired (only it, or its members, renew and release).
CREATE TABLE fenced_lease_state (
    ns int4 NOT NULL,
    id int4 NOT NULL,
    key text,
    owner text,
    holder regrole,
    token bigint NOT NULL,
    acquired_at timestamptz,
    renewed_at timestamptz,
    expires_at timestamptz,
    PRIMARY KEY (ns, id)
);
COMMENT ON TABLE fenced_lease_state IS
    'fenced_lock: the state of every lease (acquire_lease); read it through fenced_leases.';
-- Readable by all; written only by the lease functions, which write as the table's owner.
REVOKE ALL ON TABLE fenced_lease_state FROM PUBLIC;
GRANT SELECT ON TABLE fenced_lease_state TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('fenced_lease_state', '');

CREATE  FUNCTION "acquire_lease"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval /* Option < Interval > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_wrapper';
CREATE  FUNCTION "acquire_lease"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"wait" interval /* Option < Interval > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_wait_wrapper';
CREATE  FUNCTION "acquire_lease_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval /* Option < Interval > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_named_wrapper';
CREATE  FUNCTION "acquire_lease_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"wait" interval /* Option < Interval > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_named_wait_wrapper';
CREATE  FUNCTION "acquire_lease_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval /* Option < Interval > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_named_bigint_wrapper';
CREATE  FUNCTION "acquire_lease_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"wait" interval /* Option < Interval > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_named_bigint_wait_wrapper';
CREATE  FUNCTION "release_lease"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"token" bigint /* Option < i64 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_lease_wrapper';
CREATE  FUNCTION "release_lease_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"token" bigint /* Option < i64 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_lease_named_wrapper';
CREATE  FUNCTION "release_lease_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"token" bigint /* Option < i64 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_lease_named_bigint_wrapper';
CREATE  FUNCTION "renew_lease"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"token" bigint, /* Option < i64 > */
	"ttl" interval /* Option < Interval > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'renew_lease_wrapper';
CREATE  FUNCTION "renew_lease_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"token" bigint, /* Option < i64 > */
	"ttl" interval /* Option < Interval > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'renew_lease_named_wrapper';
CREATE  FUNCTION "renew_lease_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"token" bigint, /* Option < i64 > */
	"ttl" interval /* Option < Interval > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'renew_lease_named_bigint_wrapper';

-- fenced_locks: a key column (the text of a key acquired by name), kept in the grants table;
-- a session grant's token is shown only while its lock was not released behind fenced_lock's
-- back (pg_advisory_unlock_all, DISCARD ALL); its rows come from fenced_lock_rows(), which
-- joins the lock table and the grants table by hashing (0.1.0's SQL join could take seconds
-- with a filter). The view, the functions it reads and fenced_lock_holder (which returns its
-- rows) are made again.
DROP FUNCTION @extschema@.fenced_lock_holder(integer, integer);
DROP VIEW @extschema@.fenced_locks;
DROP FUNCTION @extschema@.fenced_lock_grants();
CREATE  FUNCTION "fenced_lock_grants"() RETURNS TABLE (
	"pid" INT,  /* i32 */
	"ns" INT,  /* i32 */
	"id" INT,  /* i32 */
	"token" bigint,  /* i64 */
	"scope" TEXT,  /* & '_ str */
	"acquired_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"key" TEXT,  /* Option < String > */
	"owner" TEXT  /* Option < String > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fenced_lock_grants_wrapper';

CREATE  FUNCTION "fenced_lock_rows"() RETURNS TABLE (
	"ns" INT,  /* i32 */
	"key" TEXT,  /* Option < String > */
	"id" INT,  /* i32 */
	"pid" INT,  /* Option < i32 > */
	"granted" bool,  /* bool */
	"token" bigint,  /* Option < i64 > */
	"scope" TEXT,  /* Option < & '_ str > */
	"owner" TEXT,  /* Option < String > */
	"acquired_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"wait_started" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fenced_lock_rows_wrapper';

ALTER FUNCTION fenced_lock_rows() ROWS 10000;

CREATE VIEW fenced_locks AS
SELECT r.ns,
       n.name AS namespace,
       r.key,
       r.id,
       r.pid,
       r.granted,
       r.token,
       r.scope,
       r.owner,
       r.acquired_at,
       r.wait_started,
       CASE WHEN NOT r.granted THEN pg_catalog.clock_timestamp() - r.wait_started END AS waiting,
       CASE WHEN NOT r.granted THEN pg_catalog.pg_blocking_pids(r.pid) END AS blocked_by,
       a.application_name,
       a.usename,
       a.client_addr,
       a.state,
       a.xact_start,
       a.state_change,
       a.query
  FROM @extschema@.fenced_lock_rows() r
  LEFT JOIN @extschema@.fenced_namespaces n ON n.ns = r.ns
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = r.pid;

GRANT SELECT ON fenced_locks TO PUBLIC;

COMMENT ON VIEW fenced_locks IS
    'fenced_lock: every two-int4 advisory lock of this database, held or awaited: key (signed), '
    'namespace name, the key''s text when acquired by name, holder or waiter, '
    'token/scope/owner/acquired_at (when preloaded), wait time, blockers, and the session.';

-- The leases that are held (or expired but not taken over), with their namespace's name.
CREATE VIEW fenced_leases AS
SELECT l.ns,
       n.name AS namespace,
       l.key,
       l.id,
       l.owner,
       l.holder AS role,
       l.token,
       l.acquired_at,
       l.renewed_at,
       l.expires_at,
       l.expires_at <= pg_catalog.clock_timestamp() AS expired
  FROM @extschema@.fenced_lease_state l
  LEFT JOIN @extschema@.fenced_namespaces n ON n.ns = l.ns
 WHERE l.owner IS NOT NULL;

GRANT SELECT ON fenced_leases TO PUBLIC;

COMMENT ON VIEW fenced_leases IS
    'fenced_lock: every lease held, or expired and not yet taken over: key, owner, the role that '
    'acquired it, token, acquired/renewed/expires at (the database''s clock), expired.';

CREATE FUNCTION fenced_lock_holder(ns int4, id int4) RETURNS SETOF @extschema@.fenced_locks
    LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The same message and SQLSTATE as every other fenced_lock function (errors.rs).
    IF ns IS NULL OR id IS NULL THEN
        RAISE EXCEPTION 'fenced_lock_holder: argument "%" must not be NULL',
                        CASE WHEN ns IS NULL THEN 'ns' ELSE 'id' END
              USING ERRCODE = 'null_value_not_allowed',
                    DETAIL = 'Every argument of a fenced_lock function is required.';
    END IF;
    RETURN QUERY SELECT * FROM @extschema@.fenced_locks f
                  WHERE f.granted AND f.ns = fenced_lock_holder.ns AND f.id = fenced_lock_holder.id;
END
$$;

CREATE FUNCTION fenced_lock_holder_named(namespace text, key text)
    RETURNS SETOF @extschema@.fenced_locks
    LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    registered int4;
BEGIN
    IF namespace IS NULL OR key IS NULL THEN
        RAISE EXCEPTION 'fenced_lock_holder_named: argument "%" must not be NULL',
                        CASE WHEN namespace IS NULL THEN 'namespace' ELSE 'key' END
              USING ERRCODE = 'null_value_not_allowed',
                    DETAIL = 'Every argument of a fenced_lock function is required.';
    END IF;
    SELECT n.ns INTO registered FROM @extschema@.fenced_namespaces n
     WHERE n.name = fenced_lock_holder_named.namespace;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fenced lock namespace "%" is not registered', namespace
              USING ERRCODE = 'undefined_object',
                    HINT = 'Register it first: SELECT register_namespace(''name'');';
    END IF;
    RETURN QUERY SELECT * FROM @extschema@.fenced_lock_holder(registered, @extschema@.fenced_key(key));
END
$$;

CREATE FUNCTION fenced_lock_holder_named_bigint(namespace text, key bigint)
    RETURNS SETOF @extschema@.fenced_locks
    LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'fenced_lock_holder_named_bigint: argument "key" must not be NULL'
              USING ERRCODE = 'null_value_not_allowed',
                    DETAIL = 'Every argument of a fenced_lock function is required.';
    END IF;
    RETURN QUERY SELECT * FROM @extschema@.fenced_lock_holder_named(namespace, key::text);
END
$$;



COMMENT ON FUNCTION fenced_lock_holder(integer, integer) IS
    'The fenced_locks row of the session holding (ns, id), or no row: for scripts.';
COMMENT ON FUNCTION fenced_lock_grants() IS
    'The live fenced grants of this database (pid, ns, id, token, scope, acquired_at, key: the '
    'text of a named key, owner: the owner of a session grant; each their first 64 bytes) from '
    'the shared grants table; empty unless fenced_lock is in shared_preload_libraries.';

-- Comments of the functions that are new, or whose behaviour changed (session re-acquire).
COMMENT ON FUNCTION acquire_fenced_session(integer, integer) IS
    'Wait for the session-level advisory lock on (ns, id) (the lock of pg_advisory_lock(ns, id)) '
    'and return a new fencing token; the lock lasts until release_fenced or the end of the '
    'session. The key cannot be acquired again while held, not even by this session (behind a '
    'pooler, another client''s): SQLSTATE 55000. Owners: acquire_fenced_session_owned.';

COMMENT ON FUNCTION acquire_fenced_session_owned(integer, integer, text) IS
    'acquire_fenced_session(ns, id) for owner (a client-chosen id): re-acquiring a key this '
    'session holds for the same owner returns the same token; held for another owner, or none: '
    'SQLSTATE 55000.';

COMMENT ON FUNCTION acquire_fenced_session_owned(integer, integer, text, interval) IS
    'Like acquire_fenced_session_owned(ns, id, owner), but wait at most timeout, then raise '
    'SQLSTATE 55P03 naming the key and its holders.';

COMMENT ON FUNCTION try_acquire_fenced_session(integer, integer, text) IS
    'try_acquire_fenced_session(ns, id) for owner: the same token again when this session holds '
    'the key for owner; NULL when another session holds it, or this one for another owner.';

COMMENT ON FUNCTION become_leader(integer, integer, text) IS
    'become_leader(ns, id) for owner: the same term again when this session leads for owner; '
    'NULL when another session leads, or this one for another owner.';

COMMENT ON FUNCTION release_fenced(integer, integer, text) IS
    'release_fenced(ns, id) for a lock taken for owner. False, with a WARNING, when this session '
    'does not hold it, or holds it for another owner.';

COMMENT ON FUNCTION current_leader(integer, integer) IS
    'The session holding (ns, id): pid, application_name, client_addr, term, since and owner '
    '(NULL unless fenced_lock is preloaded, which keeps the grants table); no row when nobody '
    'holds it.';

COMMENT ON FUNCTION acquire_lease(integer, integer, text, interval) IS
    'The lease on (ns, id) for owner, for ttl on the database''s clock: a new token (larger than '
    'every earlier one) when the key is free or expired, the same token with the TTL extended '
    'when owner holds it, NULL when another owner does. Leases are not advisory locks.';

COMMENT ON FUNCTION acquire_lease(integer, integer, text, interval, interval) IS
    'Like acquire_lease(ns, id, owner, ttl), but wait up to wait for a release or the holder''s '
    'expiry (sleeping, not polling); then NULL.';

COMMENT ON FUNCTION renew_lease(integer, integer, bigint, interval) IS
    'Extend the lease held with token to ttl from now: the new expiry, or NULL when the lease is '
    'lost (taken over after expiry, released, never held with token, or by another role).';

COMMENT ON FUNCTION release_lease(integer, integer, bigint) IS
    'Release the lease held with token and wake waiting acquires: true, or false when no lease '
    'is held with token by this role.';

-- Every key-taking function F(ns, id, ...) has two named forms, under names of their own (an
-- untyped driver call must never pick another key): F_named(namespace text, key text, ...) and
-- F_named_bigint(namespace text, key bigint, ...), for the key (registered id of namespace,
-- fenced_key(key)); a bigint key is the same key as its decimal text. Their comments say so.
DO $comment_named_forms$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.oid::pg_catalog.regprocedure AS signature,
               pg_catalog.regexp_replace(p.proname, '_named(_bigint)?$', '') || '('
                   || pg_catalog.array_to_string(ARRAY['ns', 'id'] || p.proargnames[3:], ', ')
                   || ')' AS pair_form,
               p.proname ~ '_bigint$' AS bigint_key
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d
            ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
           AND d.deptype = 'e'
          JOIN pg_catalog.pg_extension e
            ON d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid = e.oid AND e.extname = 'fenced_lock'
         WHERE p.proname ~ '_named(_bigint)?$'
    LOOP
        EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', f.signature,
            pg_catalog.format('%s for the key (registered id of namespace, fenced_key(%s)).',
                              f.pair_form, CASE WHEN f.bigint_key THEN 'key::text' ELSE 'key' END));
    END LOOP;
END
$comment_named_forms$;
COMMENT ON FUNCTION fenced_lock_rows() IS
    'The rows of fenced_locks without the session''s columns: every two-int4 advisory lock of '
    'this database, held or awaited, with its fenced grant; one pass over the lock table and '
    'the grants table.';

-- Privileges: every object dropped and created again gets back what the DBA had granted or
-- revoked, and every new form of a 0.1.0 function (its named, bigint and owner forms) gets
-- what that function had: a DBA who revoked the session functions from PUBLIC did not mean
-- the new owner-taking ones to be PUBLIC's. From a saved ACL (saved:NAME, see the top of this
-- script) or the live function's; objects whose source had the default privileges keep them.
DO $copy_privileges$
DECLARE
    copy record;
    acl pg_catalog.aclitem[];
    item record;
BEGIN
    FOR copy IN SELECT * FROM (VALUES
        ('TABLE', '@extschema@.fenced_locks', 'saved:fenced_locks'),
        ('FUNCTION', '@extschema@.fenced_lock_grants()', 'saved:fenced_lock_grants'),
        ('FUNCTION', '@extschema@.current_leader(integer, integer)', 'saved:current_leader'),
        ('FUNCTION', '@extschema@.fenced_lock_holder(integer, integer)', 'saved:fenced_lock_holder'),
        ('FUNCTION', '@extschema@.fenced_lock_holder_named(text, text)', 'saved:fenced_lock_holder'),
        ('FUNCTION', '@extschema@.fenced_lock_holder_named_bigint(text, bigint)', 'saved:fenced_lock_holder'),
        ('FUNCTION', '@extschema@.acquire_fenced_named(text, text)', 'saved:acquire_fenced_text'),
        ('FUNCTION', '@extschema@.acquire_fenced_named_bigint(text, bigint)', 'saved:acquire_fenced_text'),
        ('FUNCTION', '@extschema@.acquire_fenced_named(text, text, interval)', 'saved:acquire_fenced_text_timeout'),
        ('FUNCTION', '@extschema@.acquire_fenced_named_bigint(text, bigint, interval)', 'saved:acquire_fenced_text_timeout'),
        ('FUNCTION', '@extschema@.try_acquire_fenced_named(text, text)', 'saved:try_acquire_fenced_text'),
        ('FUNCTION', '@extschema@.try_acquire_fenced_named_bigint(text, bigint)', 'saved:try_acquire_fenced_text'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_named(text, text)', 'saved:acquire_fenced_session_text'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_named_bigint(text, bigint)', 'saved:acquire_fenced_session_text'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_owned_named(text, text, text)', 'saved:acquire_fenced_session_text'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_owned_named_bigint(text, bigint, text)', 'saved:acquire_fenced_session_text'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_named(text, text, interval)', 'saved:acquire_fenced_session_text_timeout'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_named_bigint(text, bigint, interval)', 'saved:acquire_fenced_session_text_timeout'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_owned_named(text, text, text, interval)', 'saved:acquire_fenced_session_text_timeout'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_owned_named_bigint(text, bigint, text, interval)', 'saved:acquire_fenced_session_text_timeout'),
        ('FUNCTION', '@extschema@.try_acquire_fenced_session_named(text, text)', 'saved:try_acquire_fenced_session_text'),
        ('FUNCTION', '@extschema@.try_acquire_fenced_session_named_bigint(text, bigint)', 'saved:try_acquire_fenced_session_text'),
        ('FUNCTION', '@extschema@.try_acquire_fenced_session_named(text, text, text)', 'saved:try_acquire_fenced_session_text'),
        ('FUNCTION', '@extschema@.try_acquire_fenced_session_named_bigint(text, bigint, text)', 'saved:try_acquire_fenced_session_text'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_owned(integer, integer, text)', '@extschema@.acquire_fenced_session(integer, integer)'),
        ('FUNCTION', '@extschema@.acquire_fenced_session_owned(integer, integer, text, interval)', '@extschema@.acquire_fenced_session(integer, integer, interval)'),
        ('FUNCTION', '@extschema@.try_acquire_fenced_session(integer, integer, text)', '@extschema@.try_acquire_fenced_session(integer, integer)'),
        ('FUNCTION', '@extschema@.become_leader(integer, integer, text)', '@extschema@.become_leader(integer, integer)'),
        ('FUNCTION', '@extschema@.become_leader_named(text, text)', '@extschema@.become_leader(integer, integer)'),
        ('FUNCTION', '@extschema@.become_leader_named_bigint(text, bigint)', '@extschema@.become_leader(integer, integer)'),
        ('FUNCTION', '@extschema@.become_leader_named(text, text, text)', '@extschema@.become_leader(integer, integer)'),
        ('FUNCTION', '@extschema@.become_leader_named_bigint(text, bigint, text)', '@extschema@.become_leader(integer, integer)'),
        ('FUNCTION', '@extschema@.release_fenced(integer, integer, text)', '@extschema@.release_fenced(integer, integer)'),
        ('FUNCTION', '@extschema@.release_fenced_named(text, text)', '@extschema@.release_fenced(integer, integer)'),
        ('FUNCTION', '@extschema@.release_fenced_named_bigint(text, bigint)', '@extschema@.release_fenced(integer, integer)'),
        ('FUNCTION', '@extschema@.release_fenced_named(text, text, text)', '@extschema@.release_fenced(integer, integer)'),
        ('FUNCTION', '@extschema@.release_fenced_named_bigint(text, bigint, text)', '@extschema@.release_fenced(integer, integer)'),
        ('FUNCTION', '@extschema@.current_fence_named(text, text)', '@extschema@.current_fence(integer, integer)'),
        ('FUNCTION', '@extschema@.current_fence_named_bigint(text, bigint)', '@extschema@.current_fence(integer, integer)'),
        ('FUNCTION', '@extschema@.current_leader_named(text, text)', 'saved:current_leader'),
        ('FUNCTION', '@extschema@.current_leader_named_bigint(text, bigint)', 'saved:current_leader'),
        ('FUNCTION', '@extschema@.force_release_named(text, text)', '@extschema@.force_release(integer, integer)'),
        ('FUNCTION', '@extschema@.force_release_named_bigint(text, bigint)', '@extschema@.force_release(integer, integer)')
    ) AS c(kind, target, source)
    LOOP
        IF copy.source LIKE 'saved:%' THEN
            acl := NULLIF(pg_catalog.current_setting(
                       'fenced_lock_upgrade.' || pg_catalog.substr(copy.source, 7)), '')::pg_catalog.aclitem[];
        ELSE
            SELECT p.proacl INTO acl FROM pg_catalog.pg_proc p
             WHERE p.oid = copy.source::pg_catalog.regprocedure;
        END IF;
        CONTINUE WHEN acl IS NULL;
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM PUBLIC', copy.kind, copy.target);
        FOR item IN
            SELECT a.privilege_type, a.is_grantable,
                   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                        ELSE pg_catalog.quote_ident(r.rolname) END AS grantee
              FROM pg_catalog.aclexplode(acl) a
              LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
        LOOP
            EXECUTE pg_catalog.format('GRANT %s ON %s %s TO %s%s', item.privilege_type, copy.kind,
                                      copy.target, item.grantee,
                                      CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' END);
        END LOOP;
    END LOOP;
END
$copy_privileges$;
