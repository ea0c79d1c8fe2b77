-- On a hot standby every acquisition raises 25006: advisory locks there do not exclude the
-- primary's holders, and no token can be drawn.
\set SHOW_CONTEXT never
SELECT pg_catalog.pg_is_in_recovery() AS in_recovery;
SELECT extversion IS NOT NULL AS extension_replicated
  FROM pg_catalog.pg_extension WHERE extname = 'fenced_lock';
BEGIN;
SELECT acquire_fenced(1001, 42);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced(1001, 42, '1s');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT try_acquire_fenced(1001, 42);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- Nothing was locked on the standby.
SELECT count(*) AS advisory_locks FROM pg_catalog.pg_locks WHERE locktype = 'advisory';
