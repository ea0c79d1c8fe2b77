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
