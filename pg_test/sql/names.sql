-- Named keys: the namespace registry, fenced_key, string-key acquisition; force_release.
\set SHOW_CONTEXT never

-- fenced_key is 32-bit FNV-1a of the UTF-8 bytes, as a signed int4. These vectors pin it:
-- a change here would silently move every string key to another lock.
SELECT fenced_key('') = -2128831035 AS empty,
       fenced_key('a') = -468965076 AS a,
       fenced_key('foobar') = -1080231576 AS foobar,
       fenced_key('order:42') AS order_42,
       fenced_key('ünïcødé ✓') AS unicode;
SELECT fenced_key(NULL);
\echo :LAST_ERROR_SQLSTATE

-- The registry: lowest free positive id, idempotent, conflicts refused with 23505.
SELECT register_namespace('billing') AS billing;
SELECT register_namespace('reports', 7, 'nightly reports') AS reports;
SELECT register_namespace('jobs') AS jobs_fills_gap;
SELECT register_namespace('billing') AS billing_again,
       register_namespace('reports', 7) AS reports_again;
SELECT register_namespace('billing', 5);
\echo :LAST_ERROR_SQLSTATE
SELECT register_namespace('other', 7);
\echo :LAST_ERROR_SQLSTATE
SELECT register_namespace(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT ns, name, description, created_at <= now() AS stamped FROM fenced_namespaces ORDER BY ns;

-- String keys: (registered ns, fenced_key(key)), the same lock as the int4 form.
BEGIN;
SELECT acquire_fenced_named('billing', 'order:42') AS named_token \gset
SELECT acquire_fenced(1, fenced_key('order:42')) = :named_token AS same_grant_as_int_form;
SELECT try_acquire_fenced_named('billing', 'order:42') = :named_token AS try_same_grant,
       acquire_fenced_named('billing', 'order:42', '0') = :named_token AS timeout_same_grant;
SELECT classid, objid::int4 = fenced_key('order:42') AS objid_is_hash FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();
-- Two namespaces with the same key are two locks.
SELECT acquire_fenced_named('reports', 'order:42') > :named_token AS other_namespace_other_lock;
SELECT count(*) AS locks_held FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();
COMMIT;
SELECT acquire_fenced_named('nope', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced_named('billing', NULL::text);
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_fenced_named(NULL::text, 'x');
\echo :LAST_ERROR_SQLSTATE

-- Writable only by the owner and the roles it grants; readable by all.
CREATE ROLE fenced_reader;
SET ROLE fenced_reader;
SELECT count(*) AS readable FROM fenced_namespaces;
SELECT register_namespace('sneaky');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT INSERT ON fenced_namespaces TO fenced_reader;
SET ROLE fenced_reader;
SELECT register_namespace('granted') AS granted_role_registers;
RESET ROLE;
REVOKE INSERT ON fenced_namespaces FROM fenced_reader;

-- force_release refuses the caller's own lock (the isolation spec force_release covers
-- terminating others, and an ordinary role being refused).
BEGIN;
SELECT acquire_fenced(8101, 1) > 0 AS holding;
SELECT force_release(8101, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT force_release(8101, 1) AS nobody_holds_it;
SELECT force_release(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
DROP ROLE fenced_reader;
DELETE FROM fenced_namespaces;

-- The session-scoped functions take string keys too.
SELECT register_namespace('leases', 11) AS leases;
SELECT acquire_fenced_session_named('leases', 'primary', owner => 'me') AS lease \gset
SELECT current_fence(11, fenced_key('primary'), 'me') = :lease AS same_lock_as_int_form,
       try_acquire_fenced_session_named('leases', 'primary', 'me') = :lease AS try_same_grant,
       acquire_fenced_session_named('leases', 'primary', '0', 'me') = :lease
           AS timeout_same_grant;
SELECT release_fenced(11, fenced_key('primary'), 'me') AS released;
SELECT acquire_fenced_session_named('nope', 'primary');
\echo :LAST_ERROR_SQLSTATE
DELETE FROM fenced_namespaces;
