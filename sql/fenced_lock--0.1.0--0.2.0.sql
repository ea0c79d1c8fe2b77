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

-- fenced_locks shows a session grant's token only while the grant's lock was not released
-- behind fenced_lock's back (pg_advisory_unlock_all, DISCARD ALL). Same columns.
CREATE OR REPLACE VIEW @extschema@.fenced_locks AS
-- One snapshot of the lock table serves both uses below.
WITH locks AS MATERIALIZED (SELECT * FROM pg_catalog.pg_locks)
SELECT k.ns,
       n.name AS namespace,
       k.id,
       l.pid,
       l.granted,
       g.token,
       g.scope,
       g.acquired_at,
       l.waitstart AS wait_started,
       CASE WHEN NOT l.granted THEN pg_catalog.clock_timestamp() - l.waitstart END AS waiting,
       CASE WHEN NOT l.granted THEN pg_catalog.pg_blocking_pids(l.pid) END AS blocked_by,
       a.application_name,
       a.usename,
       a.client_addr,
       a.state,
       a.xact_start,
       a.state_change,
       a.query
  FROM locks l
  -- pg_locks shows the keys as unsigned OIDs; show them as the int4 the caller passed.
  CROSS JOIN LATERAL (
      SELECT ((l.classid::int8 + 2147483648) % 4294967296 - 2147483648)::int4 AS ns,
             ((l.objid::int8 + 2147483648) % 4294967296 - 2147483648)::int4 AS id
  ) k
  -- A backend's session grants are live only while it holds its sentinel lock (locking.rs):
  -- pg_advisory_unlock_all and DISCARD ALL release it with the grants' locks.
  LEFT JOIN (SELECT s.pid FROM locks s
              WHERE s.locktype = 'userlock' AND s.granted AND s.objid = 0 AND s.objsubid = 0
                AND s.classid::int8 = s.pid) sessions_intact ON sessions_intact.pid = l.pid
  LEFT JOIN @extschema@.fenced_lock_grants() g
         ON l.granted AND g.pid = l.pid AND g.ns = k.ns AND g.id = k.id
        AND (g.scope = 'transaction' OR sessions_intact.pid IS NOT NULL)
  LEFT JOIN @extschema@.fenced_namespaces n ON n.ns = k.ns
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 2
   AND l.database = (SELECT oid FROM pg_catalog.pg_database
                      WHERE datname = pg_catalog.current_database());
