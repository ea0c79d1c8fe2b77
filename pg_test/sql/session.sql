-- Session-scoped fenced leases and leader election, within one session.
\set SHOW_CONTEXT never

-- The lock outlives transactions. A held key is not handed out again without an owner, not
-- even in this session: the caller cannot show it is the client that took it (behind a
-- pooler it may not be). owners.sql has the owner forms.
SELECT acquire_fenced_session(7001, 1) AS s1 \gset
BEGIN;
SELECT acquire_fenced_session(7001, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT acquire_fenced_session(7001, 1, '0');
\echo :LAST_ERROR_SQLSTATE
-- The try form says busy (NULL) too: a leader without an owner polls with current_fence
-- (0.4.0's become_leader gave its term back; 1.0 has one rule for every session acquire).
SELECT try_acquire_fenced_session(7001, 1) IS NULL AS try_null,
       current_fence(7001, 1) = :s1 AS current_fence_is_token;
-- The session-level advisory lock, visible in pg_locks, held once.
SELECT locktype, classid, objid, objsubid, mode, granted FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();
-- One release frees it (no stacking): pg_advisory_unlock finds nothing left.
SELECT release_fenced(7001, 1) AS released;
SELECT count(*) AS held_after_release FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();
SELECT current_fence(7001, 1) IS NULL AS no_fence_after_release;
-- Releasing again, or a key never held: false with a WARNING.
SELECT release_fenced(7001, 1) AS released_twice;
SELECT release_fenced(7001, 99) AS never_held;
-- A new grant gets a new, larger token.
SELECT acquire_fenced_session(7001, 1) > :s1 AS new_token_larger;

-- Scope mix-ups are errors (55000), not two grants with two tokens.
BEGIN;
SELECT acquire_fenced(7001, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced(7001, 2) > 0 AS transaction_grant;
SELECT acquire_fenced_session(7001, 2);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced(7001, 3) AS t3 \gset
SELECT current_fence(7001, 3) = :t3 AS current_fence_transaction_scope;
SELECT release_fenced(7001, 3) AS release_transaction_scope;
COMMIT;
SELECT current_fence(7001, 3) IS NULL AS no_fence_after_commit;

-- A session grant taken in a rolled-back transaction survives (session locks do).
BEGIN;
SELECT acquire_fenced_session(7001, 4) AS s4 \gset
ROLLBACK;
SELECT current_fence(7001, 4) = :s4 AS survives_rollback;

-- Released behind fenced_lock's back: current_fence follows reality.
SELECT pg_catalog.pg_advisory_unlock(7001, 4) AS builtin_unlock;
SELECT current_fence(7001, 4) IS NULL AS no_fence_after_builtin_unlock;
SELECT acquire_fenced_session(7001, 4) > :s4 AS reacquired_with_new_token;

-- release_all_fenced releases every session lock and counts them.
SELECT acquire_fenced_session(7001, 5) > 0, acquire_fenced_session(7001, 6) > 0;
SELECT release_all_fenced() AS released_all;
SELECT release_all_fenced() AS released_none;
SELECT count(*) AS advisory_locks_left FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();

-- The leader's row of fenced_locks: this session, with its application_name; no row when nobody leads.
SET application_name = 'fenced_leader_test';
SELECT try_acquire_fenced_session(7002, 1) AS term \gset
SELECT current_fence(7002, 1) = :term AS polled_with_current_fence,
       try_acquire_fenced_session(7002, 1, 'an-owner') IS NULL AS another_owner_does_not_lead;
-- (this server preloads fenced_lock, so the term and since are known)
SELECT pid = pg_catalog.pg_backend_pid() AS is_me, application_name, term = :term AS term,
       since <= pg_catalog.clock_timestamp() AS since
  FROM (SELECT pid, application_name, client_addr, token AS term, acquired_at AS since, owner FROM fenced_locks WHERE ns = 7002 AND id = 1 AND granted AND mode = 'exclusive') AS leader;
SELECT release_fenced(7002, 1);
SELECT count(*) AS leaders FROM (SELECT pid, application_name, client_addr, token AS term, acquired_at AS since, owner FROM fenced_locks WHERE ns = 7002 AND id = 1 AND granted AND mode = 'exclusive') AS leader;
RESET application_name;

-- (The NOTIFY on release is checked in the session_leases isolation spec, where the sender
-- shows as a session name rather than a PID.)

-- Guards: NULL arguments (22004).
SELECT acquire_fenced_session(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced_session(1, 1, shared => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_fenced_session(1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_fenced_session(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT release_fenced(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT current_fence(1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced_session(1, 1, '-1s');
\echo :LAST_ERROR_SQLSTATE
