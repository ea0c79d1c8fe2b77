-- fenced_lock 0.3.0 -> 0.4.0. Every SQL change since 0.3.0, so that an upgraded database
-- equals a fresh 0.4.0 install (pg_test/upgrade/catalog.sql compares them), privileges a DBA
-- granted or revoked included: objects are changed in place, never dropped and re-created.
\echo Use "ALTER EXTENSION fenced_lock UPDATE TO '0.4.0'" to load this file. \quit

-- A lease's available_at never fails to read: expiry plus lock-delay, saturated to
-- 'infinity' past the end of time (fenced_leases for every role; the lease functions read
-- rows the same way).
CREATE  FUNCTION "fenced_lease_available_at"(
	"expires_at" timestamp with time zone, /* TimestampWithTimeZone */
	"lock_delay" interval /* Interval */
) RETURNS timestamp with time zone /* TimestampWithTimeZone */
STRICT STABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fenced_lease_available_at_wrapper';

-- Lease semaphores (acquire_lease_permit): a row per permit slot of a key; slot 0 is the
-- key's lease itself, which every existing row is.
ALTER TABLE @extschema@.fenced_lease_state
    ADD COLUMN slot int4 NOT NULL DEFAULT 0,
    DROP CONSTRAINT fenced_lease_state_pkey,
    ADD CONSTRAINT fenced_lease_state_pkey PRIMARY KEY (ns, id, slot);

CREATE OR REPLACE VIEW fenced_leases AS
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
       @extschema@.fenced_lease_available_at(l.expires_at, l.lock_delay) AS available_at,
       l.slot
  FROM @extschema@.fenced_lease_state l
  LEFT JOIN @extschema@.fenced_namespaces n ON n.ns = l.ns
 WHERE l.owner IS NOT NULL;

COMMENT ON FUNCTION fenced_lease_available_at(timestamptz, interval) IS
    'fenced_lock: when a lease that expires unreleased at expires_at, with lock_delay, is '
    'available to another owner: their sum, ''infinity'' past the end of time (fenced_leases).';

-- DROP EXTENSION (also DROP SCHEMA or DROP OWNED, which can drop it) keeps the last token this
-- installation issued as the database's fenced_lock.token_floor, in the shared catalog
-- pg_db_role_setting, which survives the extension, replicates to standbys and is restored
-- by pg_dump --create: the next CREATE EXTENSION starts above it. The floor only
-- rises. It runs before the command, while the sequence exists, and as the extension's owner.
CREATE FUNCTION fenced_lock_keep_token_floor() RETURNS event_trigger
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
    -- stops no DROP.
    IF issued > coalesce(pg_catalog.substr(
           (SELECT c FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) c
             WHERE s.setrole = 0
               AND s.setdatabase = (SELECT oid FROM pg_catalog.pg_database
                                     WHERE datname = pg_catalog.current_database())
               AND c ~ '^fenced_lock\.token_floor=[0-9]{1,18}$'), 25)::bigint, 0) THEN
        EXECUTE pg_catalog.format('ALTER DATABASE %I SET fenced_lock.token_floor = %L',
                                  pg_catalog.current_database(), issued::text);
    END IF;
END
$$;
REVOKE ALL ON FUNCTION fenced_lock_keep_token_floor() FROM PUBLIC;
COMMENT ON FUNCTION fenced_lock_keep_token_floor() IS
    'fenced_lock: the event trigger function that keeps the last token issued as the '
    'database''s fenced_lock.token_floor before DROP EXTENSION (or DROP SCHEMA, DROP OWNED).';

CREATE EVENT TRIGGER fenced_lock_keep_token_floor ON ddl_command_start
    WHEN TAG IN ('DROP EXTENSION', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION fenced_lock_keep_token_floor();

-- The cumulative counters (src/stats): their row functions and reset, the two views.
CREATE  FUNCTION "fenced_lock_refusal_rows"() RETURNS TABLE (
	"dbid" oid,  /* Option < pg_sys :: Oid > */
	"relid" oid,  /* Option < pg_sys :: Oid > */
	"check_name" TEXT,  /* Option < String > */
	"counters" bigint[],  /* Vec < i64 > */
	"times" timestamp with time zone[],  /* Vec < Option < TimestampWithTimeZone > > */
	"stats_reset" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fenced_lock_refusal_rows_wrapper';

CREATE  FUNCTION "fenced_lock_stats_reset"() RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fenced_lock_stats_reset_wrapper';

CREATE  FUNCTION "fenced_lock_stats_rows"() RETURNS TABLE (
	"dbid" oid,  /* Option < pg_sys :: Oid > */
	"ns" INT,  /* Option < i32 > */
	"counters" bigint[],  /* Vec < i64 > */
	"times" timestamp with time zone[],  /* Vec < Option < TimestampWithTimeZone > > */
	"stats_reset" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fenced_lock_stats_rows_wrapper';

-- Cumulative counters (when preloaded), since stats_reset: one row per database and
-- namespace counted, one per database (namespace NULL) for tokens drawn for no key, failover
-- skips and advances, and one "other" row (database NULL) for namespaces counted after
-- fenced_lock.stats_max_namespaces rows. Every role sees its own database's rows; roles with
-- pg_read_all_stats, and the extension's owner, see every database's.
CREATE VIEW fenced_lock_stats AS
SELECT s.dbid,
       d.datname AS database,
       s.ns,
       n.name AS namespace,
       s.counters[1] AS acquired_immediately,
       s.counters[2] AS acquired_after_wait,
       s.counters[3] / 1000.0::float8 AS wait_time,
       s.counters[4] / 1000.0::float8 AS max_wait_time,
       s.counters[5] AS busy,
       s.counters[6] AS lock_timeouts,
       s.counters[7] AS timeouts,
       s.counters[8] AS deadlocks,
       s.counters[9] AS tokens_issued,
       s.counters[10] AS session_grants,
       s.counters[11] AS leader_terms,
       s.counters[12] AS leases_acquired,
       s.counters[13] AS leases_renewed,
       s.counters[14] AS leases_released,
       s.counters[15] AS leases_taken_over,
       s.counters[16] AS leases_delayed,
       s.counters[17] AS force_released,
       s.counters[18] AS failover_skips,
       NULLIF(s.counters[19], 0) AS last_failover_skip_timeline,
       s.times[1] AS last_failover_skip_at,
       s.counters[21] AS token_advances,
       NULLIF(s.counters[22], 0) AS last_token_advance_timeline,
       s.times[2] AS last_token_advance_at,
       s.stats_reset
  FROM @extschema@.fenced_lock_stats_rows() s
  LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dbid
  -- Namespace names are this database's: other databases' rows show only the number.
  LEFT JOIN @extschema@.fenced_namespaces n
    ON n.ns = s.ns
   AND s.dbid = (SELECT oid FROM pg_catalog.pg_database
                  WHERE datname = pg_catalog.current_database());

GRANT SELECT ON fenced_lock_stats TO PUBLIC;

COMMENT ON VIEW fenced_lock_stats IS
    'fenced_lock: cumulative counters per database and namespace since stats_reset (needs '
    'preloading): acquisitions at once and after a wait, wait time (ms), busy tries, timeouts, '
    'deadlocks, tokens, session grants, leader terms, leases, force releases, failover skips and '
    'token advances.';

-- Tokens checked where data lives (when preloaded), since stats_reset: one row per database,
-- table and check (the ledger's checks count at fence_ledger), and one "other" row (database
-- NULL) for tables counted after fenced_lock.stats_max_tables rows. Visible as fenced_lock_stats
-- is.
CREATE VIEW fenced_lock_refusals AS
SELECT s.dbid,
       d.datname AS database,
       s.relid,
       c.oid::pg_catalog.regclass AS relation,
       s.check_name AS checked_by,
       s.counters[1] AS refused,
       NULLIF(s.counters[2], 0) AS last_refused_token,
       s.times[1] AS last_refused_at,
       s.counters[4] AS accepted,
       NULLIF(s.counters[5], 0) AS last_accepted_token,
       NULLIF(s.counters[6], 0) AS highest_accepted_token,
       s.times[2] AS last_accepted_at,
       s.stats_reset
  FROM @extschema@.fenced_lock_refusal_rows() s
  LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dbid
  -- Table names are this database's: other databases' rows show only the OID.
  LEFT JOIN pg_catalog.pg_class c
    ON c.oid = s.relid
   AND s.dbid = (SELECT oid FROM pg_catalog.pg_database
                  WHERE datname = pg_catalog.current_database());

GRANT SELECT ON fenced_lock_refusals TO PUBLIC;

COMMENT ON VIEW fenced_lock_refusals IS
    'fenced_lock: fencing tokens checked per table and check since stats_reset (needs '
    'preloading): stale tokens refused, the last one and when; tokens accepted, the last, the '
    'highest, and when.';

COMMENT ON FUNCTION fenced_lock_stats_rows() IS
    'fenced_lock: the rows of fenced_lock_stats (counters in the view''s order).';
COMMENT ON FUNCTION fenced_lock_refusal_rows() IS
    'fenced_lock: the rows of fenced_lock_refusals (counters in the view''s order).';
COMMENT ON FUNCTION fenced_lock_stats_reset() IS
    'fenced_lock: zero the counters of fenced_lock_stats and fenced_lock_refusals, in every '
    'database; returns when. Only for the extension''s owner, who may grant it.';
-- Zeroing every database's counters is the owner's decision (as pg_stat_statements_reset is).
REVOKE EXECUTE ON FUNCTION fenced_lock_stats_reset() FROM PUBLIC;

-- Shared locks (acquire_fenced_shared and its session forms) and fenced counting semaphores
-- (acquire_fenced_permit and its forms, release_fenced_permit).
CREATE  FUNCTION "acquire_fenced_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_wrapper';

CREATE  FUNCTION "acquire_fenced_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_within_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_named_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_named_within_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_named_bigint_within_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_within_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_named_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_named_within_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT, /* Option < i32 > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_named_bigint_within_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_owned"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_owned_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_owned"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_owned_within_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_owned_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_owned_named_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_owned_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_owned_named_within_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_owned_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_owned_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_permit_session_owned_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_permit_session_owned_named_bigint_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared"(
	"ns" INT, /* Option < i32 > */
	"id" INT /* Option < i32 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_wrapper';

CREATE  FUNCTION "acquire_fenced_shared"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_named_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_named_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_named_bigint_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT /* Option < i32 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_named_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_named_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_named_bigint_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_owned"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_owned_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_owned"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_owned_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_owned_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_owned_named_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_owned_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_owned_named_within_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_owned_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_owned_named_bigint_wrapper';

CREATE  FUNCTION "acquire_fenced_shared_session_owned_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT, /* Option < & str > */
	"timeout" interval /* Option < pgrx :: datum :: Interval > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_fenced_shared_session_owned_named_bigint_within_wrapper';

CREATE  FUNCTION "release_fenced_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"slot" INT /* Option < i32 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_permit_wrapper';

CREATE  FUNCTION "release_fenced_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"slot" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_permit_owner_wrapper';

CREATE  FUNCTION "release_fenced_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"slot" INT /* Option < i32 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_permit_named_wrapper';

CREATE  FUNCTION "release_fenced_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"slot" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_permit_owner_named_wrapper';

CREATE  FUNCTION "release_fenced_permit_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"slot" INT /* Option < i32 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_permit_named_bigint_wrapper';

CREATE  FUNCTION "release_fenced_permit_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"slot" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'release_fenced_permit_owner_named_bigint_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_named_bigint_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_session_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_session_owner_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_session_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_session_owner_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT /* Option < i32 > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_session_named_bigint_wrapper';

CREATE  FUNCTION "try_acquire_fenced_permit_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_permit_session_owner_named_bigint_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared"(
	"ns" INT, /* Option < i32 > */
	"id" INT /* Option < i32 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_named_bigint_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT /* Option < i32 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_session_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared_session"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_session_owner_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_session_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared_session_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_session_owner_named_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint /* Option < i64 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_session_named_bigint_wrapper';

CREATE  FUNCTION "try_acquire_fenced_shared_session_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"owner" TEXT /* Option < & str > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'try_acquire_fenced_shared_session_owner_named_bigint_wrapper';

-- Lease semaphores: a permit of a key's lease, renewed and released by token as any lease.
CREATE  FUNCTION "acquire_lease_permit"(
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
AS 'MODULE_PATHNAME', 'acquire_lease_permit_wrapper';

CREATE  FUNCTION "acquire_lease_permit"(
	"ns" INT, /* Option < i32 > */
	"id" INT, /* Option < i32 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"wait" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_permit_wait_wrapper';

CREATE  FUNCTION "acquire_lease_permit_named"(
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
AS 'MODULE_PATHNAME', 'acquire_lease_permit_named_wrapper';

CREATE  FUNCTION "acquire_lease_permit_named"(
	"namespace" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"wait" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_permit_named_wait_wrapper';

CREATE  FUNCTION "acquire_lease_permit_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_permit_named_bigint_wrapper';

CREATE  FUNCTION "acquire_lease_permit_named_bigint"(
	"namespace" TEXT, /* Option < & str > */
	"key" bigint, /* Option < i64 > */
	"permits" INT, /* Option < i32 > */
	"owner" TEXT, /* Option < & str > */
	"ttl" interval, /* Option < Interval > */
	"wait" interval /* Option < Interval > */
) RETURNS TABLE (
	"slot" INT,  /* i32 */
	"token" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'acquire_lease_permit_named_bigint_wait_wrapper';

-- fenced_locks gains two columns at its end, mode (exclusive, shared, permit) and a permit's
-- slot, from fenced_lock_rows' new shape: a new function under a passing name serves the view
-- while the old one is dropped, then takes its name (a view keeps its columns in place; a
-- function's result type is changed only by re-creating it).
CREATE  FUNCTION "fenced_lock_rows_with_modes"() RETURNS TABLE (
	"ns" INT,  /* i32 */
	"key" TEXT,  /* Option < String > */
	"id" INT,  /* i32 */
	"pid" INT,  /* Option < i32 > */
	"granted" bool,  /* bool */
	"token" bigint,  /* Option < i64 > */
	"scope" TEXT,  /* Option < & '_ str > */
	"owner" TEXT,  /* Option < String > */
	"acquired_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"wait_started" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"mode" TEXT,  /* & '_ str */
	"slot" INT  /* Option < i32 > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fenced_lock_rows_wrapper';

CREATE OR REPLACE VIEW fenced_locks AS
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
       a.query,
       r.mode,
       r.slot
  FROM @extschema@.fenced_lock_rows_with_modes() r
  LEFT JOIN @extschema@.fenced_namespaces n ON n.ns = r.ns
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = r.pid;

DROP FUNCTION @extschema@.fenced_lock_rows();
ALTER FUNCTION @extschema@.fenced_lock_rows_with_modes() RENAME TO fenced_lock_rows;
ALTER FUNCTION @extschema@.fenced_lock_rows() ROWS 10000;

COMMENT ON VIEW fenced_locks IS
    'fenced_lock: every two-int4 advisory lock of this database, held or awaited, and every '
    'permit of a fenced semaphore: key (signed), namespace name, the key''s text when acquired '
    'by name, holder or waiter, token/scope/owner/acquired_at (when preloaded), wait time, '
    'blockers, the session, the mode (exclusive, shared, permit) and a permit''s slot.';

COMMENT ON FUNCTION fenced_lock_rows() IS
    'The rows of fenced_locks without the session''s columns: every two-int4 advisory lock of '
    'this database and every permit, held or awaited, with its fenced grant, mode and slot; one '
    'pass over the lock table and the grants table.';

COMMENT ON FUNCTION acquire_fenced_shared(integer, integer) IS
    'Wait for the transaction-scoped shared advisory lock on (ns, id) (the lock of '
    'pg_advisory_xact_lock_shared(ns, id)) and return a new fencing token of its own: many '
    'shared holders at once, excluded by acquire_fenced on the key and excluding it.';

COMMENT ON FUNCTION acquire_fenced_shared(integer, integer, interval) IS
    'Like acquire_fenced_shared(ns, id), but wait at most timeout, then raise SQLSTATE 55P03.';

COMMENT ON FUNCTION try_acquire_fenced_shared(integer, integer) IS
    'Take the transaction-scoped shared lock on (ns, id) without waiting: a new fencing token, '
    'or NULL when an exclusive holder (or waiter) is ahead.';

COMMENT ON FUNCTION acquire_fenced_shared_session(integer, integer) IS
    'Wait for the session-scoped shared advisory lock on (ns, id) (pg_advisory_lock_shared''s) '
    'and return a new fencing token; release_fenced(ns, id) releases it.';

COMMENT ON FUNCTION acquire_fenced_shared_session(integer, integer, interval) IS
    'Like acquire_fenced_shared_session(ns, id), but wait at most timeout, then raise 55P03.';

COMMENT ON FUNCTION try_acquire_fenced_shared_session(integer, integer) IS
    'Take the session-scoped shared lock on (ns, id) without waiting: a token, or NULL.';

COMMENT ON FUNCTION acquire_fenced_shared_session_owned(integer, integer, text) IS
    'acquire_fenced_shared_session for an owner: only that owner gets the grant''s token back '
    'or releases it (release_fenced(ns, id, owner)).';

COMMENT ON FUNCTION acquire_fenced_shared_session_owned(integer, integer, text, interval) IS
    'Like acquire_fenced_shared_session_owned(ns, id, owner), but wait at most timeout, then '
    'raise 55P03.';

COMMENT ON FUNCTION try_acquire_fenced_shared_session(integer, integer, text) IS
    'try_acquire_fenced_shared_session for an owner: a token, or NULL.';

COMMENT ON FUNCTION acquire_fenced_permit(integer, integer, integer) IS
    'Wait for one of the permits slots of the fenced semaphore (ns, id), in arrival order, for '
    'this transaction: one row (slot, token), the token new and larger than every token granted '
    'before. Re-acquiring returns the same row.';

COMMENT ON FUNCTION acquire_fenced_permit(integer, integer, integer, interval) IS
    'Like acquire_fenced_permit(ns, id, permits), but wait at most timeout: no row when no '
    'permit came free.';

COMMENT ON FUNCTION try_acquire_fenced_permit(integer, integer, integer) IS
    'Take a permit of (ns, id) for this transaction without waiting: one row (slot, token), or '
    'no row when none is free or others wait in line.';

COMMENT ON FUNCTION acquire_fenced_permit_session(integer, integer, integer) IS
    'Wait for a permit of (ns, id) for this session: one row (slot, token); '
    'release_fenced_permit(ns, id, slot) releases it.';

COMMENT ON FUNCTION acquire_fenced_permit_session(integer, integer, integer, interval) IS
    'Like acquire_fenced_permit_session(ns, id, permits), but wait at most timeout: no row when '
    'no permit came free.';

COMMENT ON FUNCTION try_acquire_fenced_permit_session(integer, integer, integer) IS
    'Take a permit of (ns, id) for this session without waiting: one row (slot, token), or none.';

COMMENT ON FUNCTION acquire_fenced_permit_session_owned(integer, integer, integer, text) IS
    'acquire_fenced_permit_session for an owner: one permit of the key per owner; only that '
    'owner gets it back or releases it (release_fenced_permit(ns, id, slot, owner)).';

COMMENT ON FUNCTION acquire_fenced_permit_session_owned(integer, integer, integer, text, interval) IS
    'Like acquire_fenced_permit_session_owned(ns, id, permits, owner), but wait at most timeout: '
    'no row when no permit came free.';

COMMENT ON FUNCTION try_acquire_fenced_permit_session(integer, integer, integer, text) IS
    'try_acquire_fenced_permit_session for an owner: one row (slot, token), or none.';

COMMENT ON FUNCTION release_fenced_permit(integer, integer, integer) IS
    'Release this session''s permit slot of (ns, id), taken without an owner: true, or false '
    'with a WARNING when this session does not hold it so. Wakes the key''s line.';

COMMENT ON FUNCTION release_fenced_permit(integer, integer, integer, text) IS
    'Release this session''s permit slot of (ns, id) taken for owner: true, or false with a '
    'WARNING.';

COMMENT ON FUNCTION acquire_lease_permit(integer, integer, integer, text, interval) IS
    'A permit of the lease semaphore (ns, id) of permits slots for owner, for ttl on the '
    'database''s clock: one row (slot, token), the token new and larger than every earlier one, '
    'or the same row with the TTL extended when owner holds one; no row when no slot within '
    'permits is free, released or expired. Renewed and released by token (renew_lease, '
    'release_lease).';

COMMENT ON FUNCTION acquire_lease_permit(integer, integer, integer, text, interval, interval) IS
    'Like acquire_lease_permit(ns, id, permits, owner, ttl), but wait up to wait for a release '
    'or a holder''s expiry (sleeping, not polling); then no row.';

COMMENT ON VIEW fenced_leases IS
    'fenced_lock: every lease held, or expired and not yet taken over: key, owner, the role that '
    'acquired it, token, acquired/renewed/expires at (the database''s clock), expired, its '
    'lock_delay and available_at, when another owner can take it if it is not released, and '
    'the slot of a permit of a lease semaphore (0 for a lease).';

-- The new functions' named forms, commented as finalize.sql comments every named form.
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
           -- Not the key-set forms (keys text[]): their comments are their own.
           AND p.proargtypes[1] <> 'pg_catalog.text[]'::pg_catalog.regtype
    LOOP
        EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', f.signature,
            pg_catalog.format('%s for the key (registered id of namespace, fenced_key(%s)).',
                              f.pair_form, CASE WHEN f.bigint_key THEN 'key::text' ELSE 'key' END));
    END LOOP;
END
$comment_named_forms$;
