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
       @extschema@.fenced_lease_available_at(l.expires_at, l.lock_delay) AS available_at
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
