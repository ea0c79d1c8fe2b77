-- What drivers send is the API: asyncpg, node-postgres and tokio-postgres send parameters
-- untyped and let the server infer their types, as PREPARE does here without types.
\set SHOW_CONTEXT never

-- The API as installed (docs/api.md): at most 55 names and 70 signatures, no name longer than
-- 32 characters. Counted: every function in the extension's schema but the two behind its
-- event trigger (not callable by PUBLIC).
WITH api AS (
    SELECT p.oid, p.proname
      FROM pg_catalog.pg_proc p
      JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
      JOIN pg_catalog.pg_extension e ON d.refobjid = e.oid AND e.extname = 'fenced_lock'
     WHERE d.deptype = 'e' AND p.pronamespace = e.extnamespace
       AND p.proname NOT IN ('fenced_lock_keep_token_floor', 'fenced_lock_kept_token_floor')
)
SELECT count(DISTINCT proname) AS names, count(*) AS signatures,
       count(DISTINCT proname) <= 55 AND count(*) <= 70 AS within_targets,
       max(length(proname)) AS longest_name
  FROM api;
-- Callable by PUBLIC outside that schema: only the functions behind the views.
SELECT p.oid::regprocedure AS public_outside_the_api
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
  JOIN pg_catalog.pg_extension e ON d.refobjid = e.oid AND e.extname = 'fenced_lock'
 WHERE d.deptype = 'e' AND p.pronamespace <> e.extnamespace
   AND pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY p.oid::regprocedure::text COLLATE "C";
SELECT p.oid::regprocedure AS event_trigger_function_callable
  FROM pg_catalog.pg_proc p
 WHERE p.proname IN ('fenced_lock_keep_token_floor', 'fenced_lock_kept_token_floor')
   AND pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE');
-- One signature per name (an untyped call can pick no other form, and a key named by text
-- has a name of its own, F_named), but fenced_update's: its target and id are given typed or
-- as text, and an untyped one resolves to the text form, which reads it as the typed one does.
SELECT p.proname, count(*) AS signatures
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'fenced_lock')
   AND d.deptype = 'e'
 GROUP BY p.proname HAVING count(*) > 1 ORDER BY 1;
-- Every key-taking function has its named form.
SELECT p.proname AS function_without_named_form
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'fenced_lock')
   AND d.deptype = 'e' AND p.proargnames[1:2] = ARRAY['ns', 'id']
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc n WHERE n.proname = p.proname || '_named');

-- Untyped parameters resolve to the (int4, int4) key, the named forms to theirs.
PREPARE a1 AS SELECT acquire_fenced($1, $2);
PREPARE a2 AS SELECT acquire_fenced($1, $2, $3, $4);
PREPARE a3 AS SELECT try_acquire_fenced($1, $2, $3);
PREPARE a4 AS SELECT acquire_fenced_all($1, $2, $3);
PREPARE a5 AS SELECT try_acquire_fenced_all($1, $2);
PREPARE s1 AS SELECT acquire_fenced_session($1, $2, $3, $4, $5);
PREPARE s2 AS SELECT acquire_fenced_session($1, $2, owner => $3);
PREPARE s3 AS SELECT try_acquire_fenced_session($1, $2, $3, $4);
PREPARE s4 AS SELECT release_fenced($1, $2, $3);
PREPARE s5 AS SELECT release_all_fenced($1);
PREPARE s6 AS SELECT current_fence($1, $2, $3);
PREPARE p1 AS SELECT * FROM acquire_permit($1, $2, $3, $4);
PREPARE p2 AS SELECT * FROM try_acquire_permit($1, $2, $3);
PREPARE p3 AS SELECT * FROM acquire_permit_session($1, $2, $3, $4, $5);
PREPARE p4 AS SELECT * FROM try_acquire_permit_session($1, $2, $3, $4);
PREPARE p5 AS SELECT release_permit($1, $2, $3, $4);
PREPARE l1 AS SELECT try_acquire_lease($1, $2, $3, $4);
PREPARE l2 AS SELECT acquire_lease($1, $2, $3, $4, $5);
PREPARE l3 AS SELECT renew_lease($1, $2, $3, $4);
PREPARE l4 AS SELECT release_lease($1, $2, $3);
PREPARE l5 AS SELECT * FROM acquire_lease_permit($1, $2, $3, $4, $5, $6);
PREPARE l6 AS SELECT * FROM try_acquire_lease_permit($1, $2, $3, $4, $5);
PREPARE n1 AS SELECT acquire_fenced_named($1, $2);
PREPARE n2 AS SELECT acquire_fenced_named($1, $2::bigint::text);
PREPARE n3 AS SELECT acquire_fenced_named($1, $2, $3, $4);
PREPARE n4 AS SELECT try_acquire_fenced_session_named($1, $2, $3, $4);
PREPARE n5 AS SELECT try_acquire_lease_named($1, $2, $3, $4);
PREPARE n6 AS SELECT * FROM acquire_permit_session_named($1, $2, $3, $4, $5);
PREPARE u1 AS SELECT fenced_update_or_false($1, $2, $3, $4);
PREPARE u2 AS SELECT fenced_update($1, $2, $3, $4);
PREPARE f1 AS SELECT force_release($1, $2);
SELECT name, parameter_types FROM pg_catalog.pg_prepared_statements ORDER BY name COLLATE "C";
DEALLOCATE ALL;

-- A bigint key is named by its decimal text: a driver that sends the number untyped (text)
-- and one that sends it as int8 (cast, $1::text) take the same lock.
SELECT register_namespace('orders', 4101) AS orders;
BEGIN;
SELECT acquire_fenced_named('orders', 5000000000::text) AS big \gset
SELECT acquire_fenced_named('orders', '5000000000') = :big AS same_grant_as_text,
       acquire_fenced(4101, fenced_key('5000000000')) = :big AS same_grant_as_pair;
SELECT acquire_fenced_named('orders', 'order:42') > :big AS named;
-- fenced_locks shows the key as given, beside its hash.
SELECT namespace, key, id = fenced_key(key) AS id_is_its_hash FROM fenced_locks
 WHERE ns = 4101 AND granted ORDER BY key COLLATE "C";
SELECT current_fence_named('orders', 5000000000::text) = :big AS current_fence_named_by_number;
COMMIT;
-- A long key is kept to its first 64 bytes, cut at a character boundary.
BEGIN;
SELECT acquire_fenced_named('orders', repeat('é', 40)) > 0 AS acquired;
SELECT octet_length(key) AS kept_bytes, key = repeat('é', 32) AS whole_characters
  FROM fenced_locks WHERE ns = 4101 AND granted;
COMMIT;
-- Session-scoped named forms, the leader and the release, by name.
SELECT try_acquire_fenced_session_named('orders', 'nightly') > 0 AS leads;
SELECT pid = pg_backend_pid() AS leader_is_me FROM fenced_locks
 WHERE namespace = 'orders' AND key = 'nightly' AND granted AND mode = 'exclusive';
SELECT release_fenced_named('orders', 'nightly') AS released;
SELECT acquire_fenced_session_named('orders', 7::text) > 0 AS session_bigint,
       release_fenced_named('orders', 7::text) AS released_bigint;
SELECT force_release_named('orders', 'nobody holds it') AS terminated;
SELECT acquire_fenced_named('nope', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced_named('orders', NULL::text);
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
PREPARE u AS SELECT fenced_update_or_false($1, $2, $3, $4);
EXECUTE u('keyed_int', '1', 5, '{"v": "int"}');
EXECUTE u('keyed_big', '5000000000', 5, '{"v": "bigint"}');
EXECUTE u('keyed_uuid', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 5, '{"v": "uuid"}');
EXECUTE u('keyed_text', 'k1', 5, '{"v": "text"}');
EXECUTE u('keyed_int', '1', 4, '{"v": "stale"}');
EXECUTE u('keyed_int', 'one', 6, '{"v": "bad key"}');
\echo :LAST_ERROR_SQLSTATE
DEALLOCATE u;
-- fenced_update, untyped: written (void), or SF001 when superseded, never a false that
-- a driver returning "f" could read as true.
PREPARE s AS SELECT fenced_update($1, $2, $3, $4);
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
