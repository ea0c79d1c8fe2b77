-- Shared fenced locks: pg_advisory_xact_lock_shared's lock (and pg_advisory_lock_shared's at
-- session scope), each grant with a token of its own. Other sessions' holders and waiters are
-- in specs/shared_locks.spec.
\set SHOW_CONTEXT never
\set VERBOSITY default

BEGIN;
SELECT new_fencing_token() AS before \gset
SELECT acquire_fenced(7701, 1, shared => true) AS s1 \gset
SELECT :s1 > :before AS token_above_earlier,
       acquire_fenced(7701, 1, shared => true) = :s1 AS same_token,
       try_acquire_fenced(7701, 1, shared => true) = :s1 AS try_same,
       acquire_fenced(7701, 1, '0', shared => true) = :s1 AS timeout_same,
       current_fence(7701, 1) = :s1 AS current_fence;
-- The lock is the built-in shared advisory lock: pg_advisory_xact_lock_shared does not wait,
-- pg_try_advisory_xact_lock (exclusive) from another session would.
SELECT locktype, classid, objid, objsubid, mode FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND classid = 7701 AND pid = pg_catalog.pg_backend_pid();
SELECT ns, id, mode, scope, token = :s1 AS token FROM fenced_locks WHERE ns = 7701;
-- One grant per key: no upgrade to exclusive in the same transaction (55000).
SELECT acquire_fenced(7701, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced(7701, 2) IS NOT NULL AS exclusive;
SELECT try_acquire_fenced(7701, 2, shared => true);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced(7701, 3, shared => true) IS NOT NULL AS shared;
SELECT acquire_fenced_all(7701, ARRAY[3]);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- Outside a transaction block: 25P01, as acquire_fenced.
SELECT acquire_fenced(7701, 1, shared => true);
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced(7701, 1, '-1s', shared => true);
\echo :LAST_ERROR_SQLSTATE

-- Session scope: released by release_fenced (whatever the mode), owners as everywhere.
SELECT acquire_fenced_session(7702, 1, shared => true) AS ss \gset
-- Taken without an owner, a session grant goes back to no one (as acquire_fenced_session's).
SELECT try_acquire_fenced_session(7702, 1, shared => true) IS NULL AS not_given_back;
SELECT acquire_fenced_session(7702, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT mode, scope FROM fenced_locks WHERE ns = 7702;
SELECT release_fenced(7702, 1) AS released;
SELECT count(*) AS left FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND classid = 7702;
SELECT acquire_fenced_session(7702, 2, owner => 'reader-a', shared => true) AS ra \gset
SELECT try_acquire_fenced_session(7702, 2, 'reader-b', shared => true) IS NULL AS other_owner_null;
SELECT acquire_fenced_session(7702, 2, '0', 'reader-a', true) = :ra AS same_owner;
SELECT release_fenced(7702, 2, 'reader-b') AS wrong_owner;
SELECT release_all_fenced('reader-a') AS released_for_a;

-- Named forms.
SELECT register_namespace('caches', 7703) AS caches_ns;
BEGIN;
SELECT acquire_fenced_named('caches', 'user:1', shared => true) AS named \gset
SELECT acquire_fenced_named('caches', 1::text, shared => true) IS NOT NULL AS bigint_form,
       try_acquire_fenced_named('caches', 'user:1', shared => true) = :named AS same_key;
SELECT key, mode FROM fenced_locks WHERE ns = 7703 ORDER BY key;
COMMIT;

-- A late reader-side write is refused after a writer wrote: every grant, shared or exclusive,
-- has a fresh token, so the writer's is above the reader's.
CREATE TABLE shared_cache (id int PRIMARY KEY, value text, fence bigint NOT NULL DEFAULT 0);
INSERT INTO shared_cache VALUES (1, 'cold');
BEGIN;
SELECT acquire_fenced(7704, 1, shared => true) AS reader_token \gset
COMMIT;
BEGIN;
SELECT fenced_update_or_false('shared_cache', 1, acquire_fenced(7704, 1), '{"value": "written"}')
    AS writer_wrote;
COMMIT;
SELECT fenced_update_or_false('shared_cache', 1, :reader_token, '{"value": "stale fill"}') AS late_fill;
SELECT value FROM shared_cache;
DROP TABLE shared_cache;
