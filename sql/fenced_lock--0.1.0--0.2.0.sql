-- fenced_lock 0.1.0 -> 0.2.0. Every SQL change after 0.1.0, one comment each; a database
-- upgraded with this script equals a fresh 0.2.0 install (pg_test/upgrade checks it).
\echo Use "ALTER EXTENSION fenced_lock UPDATE TO '0.2.0'" to load this file. \quit

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
	"since" timestamp with time zone  /* Option < TimestampWithTimeZone > */
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
	"since" timestamp with time zone  /* Option < TimestampWithTimeZone > */
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
	"key" TEXT  /* Option < String > */
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
    'token/scope/acquired_at (when preloaded), wait time, blockers, and the session.';

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
    'text of a named key, its first 64 bytes) from the shared grants table; empty unless '
    'fenced_lock is in shared_preload_libraries.';

-- Every key-taking function F(ns, id, ...) has two named forms, under names of their own (an
-- untyped driver call must never pick another key): F_named(namespace text, key text, ...) and
-- F_named_bigint(namespace text, key bigint, ...), for the key (registered id of namespace,
-- fenced_key(key)); a bigint key is the same key as its decimal text.
COMMENT ON FUNCTION acquire_fenced_named(text, text) IS
    'acquire_fenced(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION acquire_fenced_named_bigint(text, bigint) IS
    'acquire_fenced(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION acquire_fenced_named(text, text, interval) IS
    'acquire_fenced(ns, id, timeout) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION acquire_fenced_named_bigint(text, bigint, interval) IS
    'acquire_fenced(ns, id, timeout) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION try_acquire_fenced_named(text, text) IS
    'try_acquire_fenced(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION try_acquire_fenced_named_bigint(text, bigint) IS
    'try_acquire_fenced(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION acquire_fenced_session_named(text, text) IS
    'acquire_fenced_session(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION acquire_fenced_session_named_bigint(text, bigint) IS
    'acquire_fenced_session(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION acquire_fenced_session_named(text, text, interval) IS
    'acquire_fenced_session(ns, id, timeout) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION acquire_fenced_session_named_bigint(text, bigint, interval) IS
    'acquire_fenced_session(ns, id, timeout) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION try_acquire_fenced_session_named(text, text) IS
    'try_acquire_fenced_session(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION try_acquire_fenced_session_named_bigint(text, bigint) IS
    'try_acquire_fenced_session(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION become_leader_named(text, text) IS
    'become_leader(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION become_leader_named_bigint(text, bigint) IS
    'become_leader(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION release_fenced_named(text, text) IS
    'release_fenced(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION release_fenced_named_bigint(text, bigint) IS
    'release_fenced(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION current_fence_named(text, text) IS
    'current_fence(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION current_fence_named_bigint(text, bigint) IS
    'current_fence(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION current_leader_named(text, text) IS
    'current_leader(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION current_leader_named_bigint(text, bigint) IS
    'current_leader(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION fenced_lock_holder_named(text, text) IS
    'fenced_lock_holder(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION fenced_lock_holder_named_bigint(text, bigint) IS
    'fenced_lock_holder(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION force_release_named(text, text) IS
    'force_release(ns, id) for the key (registered id of namespace, fenced_key(key)).';
COMMENT ON FUNCTION force_release_named_bigint(text, bigint) IS
    'force_release(ns, id) for the key (registered id of namespace, fenced_key(key::text)).';
COMMENT ON FUNCTION fenced_lock_rows() IS
    'The rows of fenced_locks without the session''s columns: every two-int4 advisory lock of '
    'this database, held or awaited, with its fenced grant; one pass over the lock table and '
    'the grants table.';
