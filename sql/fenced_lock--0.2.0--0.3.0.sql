-- fenced_lock 0.2.0 -> 0.3.0. Every SQL change since 0.2.0, so that an upgraded database
-- equals a fresh 0.3.0 install (pg_test/upgrade/catalog.sql compares them), privileges a DBA
-- granted or revoked included: objects are changed in place, never dropped and re-created.
\echo Use "ALTER EXTENSION fenced_lock UPDATE TO '0.3.0'" to load this file. \quit

-- Text arguments are read as UTF-8: a database in another encoding stays at 0.2.0.
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.<>) 'UTF8' THEN
        RAISE EXCEPTION 'fenced_lock requires a UTF8 database; this one is %',
                        pg_catalog.getdatabaseencoding()
              USING ERRCODE = 'feature_not_supported',
                    HINT = 'Create the database with ENCODING ''UTF8'' (TEMPLATE template0).';
    END IF;
END
$$;

-- Tokens continue from the clock (microseconds since 2000-01-01) when the sequence is behind
-- it, as a fresh install's start there: a re-created extension then starts above every token
-- this one issued. Tokens only rise, so every resource keeps accepting the new holders.
SELECT pg_catalog.setval('@extschema@.fencing_token_seq',
           GREATEST(last_value,
               ((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) - 946684800)
                * 1000000)::bigint))
  FROM @extschema@.fencing_token_seq;

-- The owner rule reaches current_fence and release_all_fenced: behind a pooler another client's
-- session lock, taken for its owner, is neither shown nor released to a caller that does not
-- name that owner. These forms name it.
CREATE  FUNCTION "current_fence"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_fence_owner_wrapper';

CREATE  FUNCTION "current_fence_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_fence_owner_named_wrapper';

CREATE  FUNCTION "current_fence_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'current_fence_owner_named_bigint_wrapper';

CREATE  FUNCTION "release_all_fenced"(
	"owner" TEXT /* Option < & str > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_all_fenced_owner_wrapper';

COMMENT ON FUNCTION release_all_fenced() IS
    'Release every session-scoped fenced lock of this session taken without an owner (with a '
    'NOTIFY each); how many.';

COMMENT ON FUNCTION release_all_fenced(text) IS
    'Release every session-scoped fenced lock of this session taken for owner (with a NOTIFY '
    'each); how many.';

COMMENT ON FUNCTION current_fence(integer, integer) IS
    'The token of the fenced lock this session holds on (ns, id) at transaction scope, or at '
    'session scope taken without an owner; else NULL.';

COMMENT ON FUNCTION current_fence(integer, integer, text) IS
    'The token of the session-scoped fenced lock this session holds on (ns, id) for owner, or '
    'NULL.';

COMMENT ON FUNCTION current_fence_named(text, text, text) IS
    'current_fence(ns, id, owner) for the key (registered id of namespace, fenced_key(key)).';

COMMENT ON FUNCTION current_fence_named_bigint(text, bigint, text) IS
    'current_fence(ns, id, owner) for the key (registered id of namespace, fenced_key(key::text)).';

-- fenced_update_strict: the same four forms, raising SF001 when superseded instead of returning
-- false (for drivers that return booleans as the strings "t"/"f", both truthy).
CREATE FUNCTION fenced_update_strict(
    target regclass,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update_strict(
    target regclass,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update_strict(
    target text,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update_strict(
    target text,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

COMMENT ON FUNCTION fenced_update_strict(regclass, anyelement, bigint, jsonb, text, text) IS
    'fenced_update that raises SF001 when the row carries a higher token instead of returning '
    'false: for drivers that return booleans as the strings t and f.';

COMMENT ON FUNCTION fenced_update_strict(regclass, text, bigint, jsonb, text, text) IS
    'fenced_update_strict with a text id, read as the key column''s type.';

COMMENT ON FUNCTION fenced_update_strict(text, anyelement, bigint, jsonb, text, text) IS
    'fenced_update_strict with the table given by name (looked up through search_path).';

COMMENT ON FUNCTION fenced_update_strict(text, text, bigint, jsonb, text, text) IS
    'fenced_update_strict with the table given by name and a text id: every parameter untyped.';

-- A token without a lock, for claims that a row lock orders (README: Claiming queue rows).
CREATE  FUNCTION "new_fencing_token"(

) RETURNS bigint /* i64 */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'new_fencing_token_wrapper';

COMMENT ON FUNCTION new_fencing_token() IS
    'A fencing token from the same allocator as every grant''s, without taking any lock: only '
    'safe under a lock that already orders the holders (a row claimed FOR UPDATE SKIP LOCKED).';

-- Many keys in one call, ascending, one token (README: Many keys in one call).
CREATE FUNCTION "acquire_fenced_all"(
	"ns" INT, /* Option < i32 > */
	"ids" INT[] /* :: std :: option :: Option < Array < i32 > > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_all_wrapper';

CREATE FUNCTION "acquire_fenced_all"(
	"ns" INT, /* Option < i32 > */
	"ids" INT[], /* :: std :: option :: Option < Array < i32 > > */
	"timeout" interval /* Option < Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_all_within_wrapper';

CREATE FUNCTION "acquire_fenced_all_named"(
	"namespace" TEXT, /* Option < & str > */
	"keys" TEXT[] /* :: std :: option :: Option < Array < & str > > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_all_named_wrapper';

CREATE FUNCTION "acquire_fenced_all_named"(
	"namespace" TEXT, /* Option < & str > */
	"keys" TEXT[], /* :: std :: option :: Option < Array < & str > > */
	"timeout" interval /* Option < Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_all_named_within_wrapper';

CREATE FUNCTION "try_acquire_fenced_all"(
	"ns" INT, /* Option < i32 > */
	"ids" INT[] /* :: std :: option :: Option < Array < i32 > > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_all_wrapper';

CREATE FUNCTION "try_acquire_fenced_all_named"(
	"namespace" TEXT, /* Option < & str > */
	"keys" TEXT[] /* :: std :: option :: Option < Array < & str > > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_all_named_wrapper';

COMMENT ON FUNCTION acquire_fenced_all(integer, integer[]) IS
    'Wait for the transaction-scoped advisory locks on (ns, id) for every id (each once), taken '
    'in ascending order so that overlapping sets never deadlock, and return one new fencing '
    'token for all of them, larger than every token granted before.';

COMMENT ON FUNCTION acquire_fenced_all(integer, integer[], interval) IS
    'Like acquire_fenced_all(ns, ids), but the whole call waits at most timeout, then raises '
    'SQLSTATE 55P03 naming the busy key and its holders.';

COMMENT ON FUNCTION try_acquire_fenced_all(integer, integer[]) IS
    'Take the transaction-scoped advisory locks on (ns, id) for every id without waiting, all '
    'or none: one new fencing token, or NULL (nothing taken) when another session holds any.';

COMMENT ON FUNCTION acquire_fenced_all_named(text, text[]) IS
    'acquire_fenced_all for named keys of a registered namespace: one token for all of them.';

COMMENT ON FUNCTION acquire_fenced_all_named(text, text[], interval) IS
    'acquire_fenced_all_named, the whole call waiting at most timeout (then 55P03).';

COMMENT ON FUNCTION try_acquire_fenced_all_named(text, text[]) IS
    'try_acquire_fenced_all for named keys of a registered namespace: all or none.';

-- A lock-delay for leases (fenced_lock.lease_lock_delay): existing leases have none.
ALTER TABLE @extschema@.fenced_lease_state ADD COLUMN lock_delay interval NOT NULL DEFAULT '0';
CREATE OR REPLACE VIEW @extschema@.fenced_leases AS
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
       l.expires_at <= pg_catalog.clock_timestamp() AS expired,
       l.lock_delay,
       l.expires_at + l.lock_delay AS available_at
  FROM @extschema@.fenced_lease_state l
  LEFT JOIN @extschema@.fenced_namespaces n ON n.ns = l.ns
 WHERE l.owner IS NOT NULL;

COMMENT ON VIEW fenced_leases IS
    'fenced_lock: every lease held, or expired and not yet taken over: key, owner, the role that '
    'acquired it, token, acquired/renewed/expires at (the database''s clock), expired, its '
    'lock_delay and available_at, when another owner can take it if it is not released.';

-- Each new form gets the privileges of the function it extends (a DBA who revoked
-- current_fence or fenced_update from PUBLIC did not mean the new forms to be PUBLIC's, nor
-- one who revoked acquire_fenced the many-key form);
-- sources with the default privileges leave the new forms at theirs.
DO $copy_privileges$
DECLARE
    copy record;
    item record;
BEGIN
    FOR copy IN
        SELECT c.target, p.proacl
          FROM (VALUES
            ('current_fence(integer, integer, text)', 'current_fence(integer, integer)'),
            ('current_fence_named(text, text, text)', 'current_fence_named(text, text)'),
            ('current_fence_named_bigint(text, bigint, text)', 'current_fence_named_bigint(text, bigint)'),
            ('release_all_fenced(text)', 'release_all_fenced()'),
            ('fenced_update_strict(regclass, anyelement, bigint, jsonb, text, text)',
             'fenced_update(regclass, anyelement, bigint, jsonb, text, text)'),
            ('fenced_update_strict(regclass, text, bigint, jsonb, text, text)',
             'fenced_update(regclass, text, bigint, jsonb, text, text)'),
            ('fenced_update_strict(text, anyelement, bigint, jsonb, text, text)',
             'fenced_update(text, anyelement, bigint, jsonb, text, text)'),
            ('fenced_update_strict(text, text, bigint, jsonb, text, text)',
             'fenced_update(text, text, bigint, jsonb, text, text)'),
            ('acquire_fenced_all(integer, integer[])', 'acquire_fenced(integer, integer)'),
            ('acquire_fenced_all(integer, integer[], interval)', 'acquire_fenced(integer, integer)'),
            ('try_acquire_fenced_all(integer, integer[])', 'try_acquire_fenced(integer, integer)'),
            ('acquire_fenced_all_named(text, text[])', 'acquire_fenced_named(text, text)'),
            ('acquire_fenced_all_named(text, text[], interval)', 'acquire_fenced_named(text, text)'),
            ('try_acquire_fenced_all_named(text, text[])', 'try_acquire_fenced_named(text, text)')
          ) AS c(target, source)
          JOIN pg_catalog.pg_proc p
            ON p.oid OPERATOR(pg_catalog.=) ('@extschema@.' || c.source)::pg_catalog.regprocedure
         WHERE p.proacl IS NOT NULL
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION @extschema@.%s FROM PUBLIC', copy.target);
        FOR item IN
            SELECT a.privilege_type, a.is_grantable,
                   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                        ELSE pg_catalog.quote_ident(r.rolname) END AS grantee
              FROM pg_catalog.aclexplode(copy.proacl) a
              LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
        LOOP
            EXECUTE pg_catalog.format('GRANT %s ON FUNCTION @extschema@.%s TO %s%s',
                                      item.privilege_type, copy.target, item.grantee,
                                      CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' END);
        END LOOP;
    END LOOP;
END
$copy_privileges$;

-- Tokens moved past a resource's highest (README: Running under Patroni).
CREATE FUNCTION "advance_fencing_tokens"(
	"past" bigint /* core::option::Option<i64> */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advance_fencing_tokens_wrapper';

COMMENT ON FUNCTION advance_fencing_tokens(bigint) IS
    'Move the token sequence forward so that every token issued after this returns is larger '
    'than past (never back): for a resource that accepted tokens this server never issued. '
    'Returns the sequence''s position. Only for the extension''s owner.';
REVOKE EXECUTE ON FUNCTION advance_fencing_tokens(bigint) FROM PUBLIC;

-- The initial privileges of every member (pg_init_privs) become those a fresh install's
-- scripts set. Privileges the upgrades carried over from a DBA's (the copies above, and the
-- objects the 0.1.0 -> 0.2.0 script re-created) were recorded as the scripts' own, so pg_dump
-- left them out and a restored database lost them; now a dump writes them as the DBA's
-- changes, as it does for a fresh install. A fresh install sets these in its scripts: the
-- token sequence private, fence_check, fence_check_strict and advance_fencing_tokens not
-- executable by PUBLIC, the tables and views readable by PUBLIC.
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
       AND i.classoid OPERATOR(pg_catalog.=) d.classid
       AND i.objoid OPERATOR(pg_catalog.=) d.objid
       AND i.privtype OPERATOR(pg_catalog.=) 'e';
    INSERT INTO pg_catalog.pg_init_privs (objoid, classoid, objsubid, privtype, initprivs)
    SELECT c.oid, 'pg_catalog.pg_class'::pg_catalog.regclass, 0, 'e',
           CASE WHEN r.public_select
                THEN pg_catalog.array_append(pg_catalog.acldefault(r.kind::pg_catalog."char", c.relowner),
                         pg_catalog.makeaclitem(0, c.relowner, 'SELECT', false))
                ELSE pg_catalog.acldefault(r.kind::pg_catalog."char", c.relowner) END
      FROM (VALUES ('fencing_token_seq', 's', false), ('fenced_locks', 'r', true),
                   ('fenced_leases', 'r', true), ('fenced_namespaces', 'r', true),
                   ('fenced_lease_state', 'r', true), ('fence_ledger', 'r', true)
           ) AS r(name, kind, public_select)
      JOIN pg_catalog.pg_class c
        ON c.oid OPERATOR(pg_catalog.=) ('@extschema@.' || r.name)::pg_catalog.regclass;
    INSERT INTO pg_catalog.pg_init_privs (objoid, classoid, objsubid, privtype, initprivs)
    SELECT p.oid, 'pg_catalog.pg_proc'::pg_catalog.regclass, 0, 'e',
           ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
      FROM (VALUES ('fence_check(text, bigint)'), ('fence_check_strict(text, bigint)'),
                   ('advance_fencing_tokens(bigint)')) AS f(signature)
      JOIN pg_catalog.pg_proc p
        ON p.oid OPERATOR(pg_catalog.=) ('@extschema@.' || f.signature)::pg_catalog.regprocedure;
END
$initial_privileges$;
