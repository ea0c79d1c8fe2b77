-- With synchronous replication in force, a token is returned only once the synchronous
-- standby confirmed its WAL. This server names a standby ('nobody') that never connects, so
-- the wait can only end by cancellation: then the call fails with 57014, never returns the
-- token.
\set SHOW_CONTEXT never
SHOW synchronous_standby_names;

SET synchronous_commit = on;
SET statement_timeout = '300ms';
BEGIN;
SELECT acquire_fenced(9001, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- The failed grant's lock went with the aborted transaction.
SELECT count(*) AS held FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();

-- At synchronous_commit = local (as for commits) there is nothing to wait for.
SET synchronous_commit = local;
BEGIN;
SELECT acquire_fenced(9001, 1) > 0 AS token_without_waiting;
COMMIT;
RESET statement_timeout;
RESET synchronous_commit;
