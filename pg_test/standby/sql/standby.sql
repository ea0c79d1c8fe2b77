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
-- Many keys in one call too.
BEGIN;
SELECT acquire_fenced_all(1001, '{41,42}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT try_acquire_fenced_all(1001, '{41,42}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- Permits and shared locks too, in either scope.
BEGIN;
SELECT * FROM acquire_permit(1001, 42, 4);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT * FROM try_acquire_permit(1001, 42, 4);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT * FROM acquire_permit_session(1001, 42, 4);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT acquire_fenced(1001, 42, shared => true);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT try_acquire_fenced_session(1001, 42, shared => true);
\echo :LAST_ERROR_SQLSTATE
-- Leases too: 25006 from every lease function, whatever a look would find; the
-- replicated lease table is readable.
SELECT try_acquire_lease(1001, 42, 'standby', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT renew_lease(1001, 42, 1, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT release_lease(1001, 42, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM try_acquire_lease_permit(1001, 42, 4, 'standby', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS leases FROM fenced_leases;
-- Nothing was locked on the standby.
SELECT count(*) AS advisory_locks FROM pg_catalog.pg_locks WHERE locktype = 'advisory';

-- This standby runs without fenced_lock preloaded: the fenced_locks view still works (a
-- built-in advisory lock, which a standby allows, shows up), with NULL token, scope and
-- acquired_at, no error and no notice.
SELECT fenced_lock_internal.fenced_lock_grants_available() AS preloaded;
SELECT pg_catalog.pg_advisory_lock(9401, 1);
SELECT ns, id, granted, token, scope, acquired_at FROM fenced_locks;
SELECT pg_catalog.pg_advisory_unlock(9401, 1);
-- The counters live in shared memory: without preloading their views say so (55000), rather
-- than show no rows or zeros that would read as "nothing happened".
SELECT * FROM fenced_lock_stats;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM fenced_lock_refusals;
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_lock_stats_reset();
\echo :LAST_ERROR_SQLSTATE

-- Registering a namespace is a write: PostgreSQL's own 25006, as for any write here (review of
-- 0.2.0, item 16: it raised XX000, "cannot assign TransactionIds during recovery").
SELECT register_namespace('on-the-standby');
\echo :LAST_ERROR_SQLSTATE
-- new_fencing_token: no token is drawn on a standby.
SELECT new_fencing_token();
\echo :LAST_ERROR_SQLSTATE
