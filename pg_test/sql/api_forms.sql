-- What drivers send is the API: asyncpg, node-postgres and tokio-postgres send parameters
-- untyped and let the server infer their types, as PREPARE does here without types.
\set SHOW_CONTEXT never

-- No key-taking function F has a (text, text) overload that an untyped F($1, $2) could pick;
-- the named forms have names of their own, F_named and F_named_bigint.
SELECT p.oid::regprocedure AS text_overload
  FROM pg_catalog.pg_proc p
 WHERE p.proname IN ('acquire_fenced', 'try_acquire_fenced', 'acquire_fenced_session',
                     'try_acquire_fenced_session', 'become_leader', 'release_fenced',
                     'current_fence', 'current_leader', 'fenced_lock_holder', 'force_release',
                     'acquire_fenced_session_owned', 'acquire_lease', 'renew_lease',
                     'release_lease')
   AND p.proargtypes[0] <> 'int4'::regtype;
-- Nor does any function have two forms of one arity (an untyped call could pick either):
-- the owner forms of the waiting session acquire have a name of their own, beside
-- acquire_fenced_session(ns, id, timeout interval).
SELECT p.proname, p.pronargs, count(*) AS forms
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'fenced_lock')
   AND d.deptype = 'e' AND p.proname NOT IN ('fenced_update', 'fenced_update_strict')
 GROUP BY p.proname, p.pronargs HAVING count(*) > 1;
SELECT f AS function_without_named_forms
  FROM unnest(ARRAY['acquire_fenced', 'try_acquire_fenced', 'acquire_fenced_session',
                    'try_acquire_fenced_session', 'become_leader', 'release_fenced',
                    'current_fence', 'current_leader', 'fenced_lock_holder',
                    'force_release', 'acquire_fenced_session_owned', 'acquire_lease',
                    'renew_lease', 'release_lease']) f
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE proname = f || '_named')
    OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE proname = f || '_named_bigint');

-- Untyped parameters resolve to the (int4, int4) key, the named forms to theirs.
PREPARE p1 AS SELECT acquire_fenced($1, $2);
PREPARE p2 AS SELECT acquire_fenced($1, $2, $3);
PREPARE p3 AS SELECT try_acquire_fenced($1, $2);
PREPARE p4 AS SELECT acquire_fenced_session($1, $2);
PREPARE p5 AS SELECT try_acquire_fenced_session($1, $2);
PREPARE p6 AS SELECT become_leader($1, $2);
PREPARE p7 AS SELECT release_fenced($1, $2);
PREPARE p8 AS SELECT current_fence($1, $2);
PREPARE p9 AS SELECT * FROM current_leader($1, $2);
PREPARE p10 AS SELECT * FROM fenced_lock_holder($1, $2);
PREPARE p11 AS SELECT force_release($1, $2);
PREPARE p12 AS SELECT acquire_fenced_session($1, $2, $3);
PREPARE o1 AS SELECT become_leader($1, $2, $3);
PREPARE o2 AS SELECT try_acquire_fenced_session($1, $2, $3);
PREPARE o3 AS SELECT acquire_fenced_session_owned($1, $2, $3);
PREPARE o4 AS SELECT acquire_fenced_session_owned($1, $2, $3, $4);
PREPARE o5 AS SELECT release_fenced($1, $2, $3);
PREPARE l1 AS SELECT acquire_lease($1, $2, $3, $4);
PREPARE l2 AS SELECT acquire_lease($1, $2, $3, $4, $5);
PREPARE l3 AS SELECT renew_lease($1, $2, $3, $4);
PREPARE l4 AS SELECT release_lease($1, $2, $3);
PREPARE l5 AS SELECT acquire_lease_named($1, $2, $3, $4);
PREPARE n1 AS SELECT acquire_fenced_named($1, $2);
PREPARE n2 AS SELECT acquire_fenced_named_bigint($1, $2);
PREPARE n3 AS SELECT acquire_fenced_named($1, $2, $3);
PREPARE u1 AS SELECT fenced_update($1, $2, $3, $4);
PREPARE u2 AS SELECT fenced_update_strict($1, $2, $3, $4);
PREPARE c1 AS SELECT current_fence($1, $2, $3);
PREPARE c2 AS SELECT release_all_fenced($1);
SELECT name, parameter_types FROM pg_catalog.pg_prepared_statements ORDER BY name COLLATE "C";
DEALLOCATE ALL;

-- A bigint key is the same key as its decimal text: a driver that sends the number untyped
-- (text) and one that sends it as int8 take the same lock.
SELECT register_namespace('orders', 4101) AS orders;
BEGIN;
SELECT acquire_fenced_named_bigint('orders', 5000000000) AS big \gset
SELECT acquire_fenced_named('orders', '5000000000') = :big AS same_grant_as_text,
       acquire_fenced(4101, fenced_key('5000000000')) = :big AS same_grant_as_pair;
SELECT acquire_fenced_named('orders', 'order:42') > :big AS named;
-- fenced_locks shows the key as given, beside its hash.
SELECT namespace, key, id = fenced_key(key) AS id_is_its_hash FROM fenced_locks
 WHERE ns = 4101 AND granted ORDER BY key COLLATE "C";
SELECT key FROM fenced_lock_holder_named_bigint('orders', 5000000000);
SELECT count(*) AS holder_rows FROM fenced_lock_holder_named('orders', 'order:42');
SELECT current_fence_named_bigint('orders', 5000000000) = :big AS current_fence_named_bigint;
COMMIT;
-- A long key is kept to its first 64 bytes, cut at a character boundary.
BEGIN;
SELECT acquire_fenced_named('orders', repeat('é', 40)) > 0 AS acquired;
SELECT octet_length(key) AS kept_bytes, key = repeat('é', 32) AS whole_characters
  FROM fenced_locks WHERE ns = 4101 AND granted;
COMMIT;
-- Session-scoped named forms, the leader and the release, by name.
SELECT become_leader_named('orders', 'nightly') > 0 AS leads;
SELECT pid = pg_backend_pid() AS leader_is_me FROM current_leader_named('orders', 'nightly');
SELECT release_fenced_named('orders', 'nightly') AS released;
SELECT acquire_fenced_session_named_bigint('orders', 7) > 0 AS session_bigint,
       release_fenced_named_bigint('orders', 7) AS released_bigint;
SELECT force_release_named('orders', 'nobody holds it') AS terminated;
SELECT acquire_fenced_named('nope', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM fenced_lock_holder_named('nope', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced_named_bigint('orders', NULL);
\echo :LAST_ERROR_SQLSTATE

-- Outside a transaction block a transaction-scoped acquire is an error (25P01): its lock
-- would end with the statement. Session scope is not concerned.
SELECT acquire_fenced(4101, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_fenced_named('orders', 'x');
\echo :LAST_ERROR_SQLSTATE
-- Several statements in one query string form one (implicit) transaction block.
SELECT 1 AS first \; SELECT acquire_fenced(4101, 1) > 0 AS in_implicit_block;
-- fenced_lock.outside_transaction = warning takes the statement-long lock and warns.
SET fenced_lock.outside_transaction = warning;
SELECT acquire_fenced(4101, 1) > 0 AS statement_long_lock;
RESET fenced_lock.outside_transaction;
SET fenced_lock.outside_transaction = sometimes;

-- fenced_update with an untyped id: text, read as the key column's type.
CREATE TABLE keyed_int (id int PRIMARY KEY, fence bigint, v text);
CREATE TABLE keyed_big (id bigint PRIMARY KEY, fence bigint, v text);
CREATE TABLE keyed_uuid (id uuid PRIMARY KEY, fence bigint, v text);
CREATE TABLE keyed_text (id text PRIMARY KEY, fence bigint, v text);
INSERT INTO keyed_int VALUES (1, 0, 'x');
INSERT INTO keyed_big VALUES (5000000000, 0, 'x');
INSERT INTO keyed_uuid VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 0, 'x');
INSERT INTO keyed_text VALUES ('k1', 0, 'x');
PREPARE u AS SELECT fenced_update($1, $2, $3, $4);
EXECUTE u('keyed_int', '1', 5, '{"v": "int"}');
EXECUTE u('keyed_big', '5000000000', 5, '{"v": "bigint"}');
EXECUTE u('keyed_uuid', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 5, '{"v": "uuid"}');
EXECUTE u('keyed_text', 'k1', 5, '{"v": "text"}');
EXECUTE u('keyed_int', '1', 4, '{"v": "stale"}');
EXECUTE u('keyed_int', 'one', 6, '{"v": "bad key"}');
\echo :LAST_ERROR_SQLSTATE
DEALLOCATE u;
-- fenced_update_strict, untyped: written (void), or SF001 when superseded, never a false that
-- a driver returning "f" could read as true.
PREPARE s AS SELECT fenced_update_strict($1, $2, $3, $4);
EXECUTE s('keyed_int', '1', 7, '{"v": "strict"}');
EXECUTE s('keyed_int', '1', 6, '{"v": "stale strict"}');
\echo :LAST_ERROR_SQLSTATE
EXECUTE s('keyed_int', '2', 8, '{"v": "no row"}');
\echo :LAST_ERROR_SQLSTATE
DEALLOCATE s;
SELECT v FROM keyed_int UNION ALL SELECT v FROM keyed_big UNION ALL SELECT v FROM keyed_uuid
UNION ALL SELECT v FROM keyed_text;
DROP TABLE keyed_int, keyed_big, keyed_uuid, keyed_text;
DELETE FROM fenced_namespaces WHERE ns = 4101;
