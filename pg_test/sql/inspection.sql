-- The fenced_locks view, on a server with fenced_lock preloaded
-- (the grants table gives token, scope and acquired_at).
\set SHOW_CONTEXT never
SELECT fenced_lock_internal.fenced_lock_grants_available() AS preloaded;
SELECT pg_catalog.current_setting('fenced_lock.max_grants') AS max_grants;
SELECT register_namespace('inspect', 9301) AS ns;

BEGIN;
SELECT acquire_fenced(9301, 1) AS t1 \gset
SELECT acquire_fenced(-9301, -1) AS t2 \gset
SELECT pg_catalog.pg_advisory_xact_lock(9301, 5);
SELECT ns, namespace, id, pid = pg_catalog.pg_backend_pid() AS mine, granted,
       token = :t1 OR token = :t2 AS token_is_acquired_one, token IS NULL AS no_token, scope,
       acquired_at BETWEEN pg_catalog.now() AND pg_catalog.clock_timestamp() AS acquired_in_xact,
       wait_started, waiting, blocked_by, application_name = 'pg_regress/inspection' AS app,
       usename, state, query LIKE 'SELECT ns, namespace%' AS query_shown
  FROM fenced_locks ORDER BY ns, id;

-- A grant rolled back with its savepoint leaves the view.
SAVEPOINT s;
SELECT acquire_fenced(9301, 2) > 0 AS in_savepoint;
SELECT count(*) AS with_savepoint_grant FROM fenced_locks WHERE ns = 9301 AND id = 2;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS after_rollback_to FROM fenced_locks WHERE ns = 9301 AND id = 2;
SELECT count(*) AS published FROM fenced_lock_internal.fenced_lock_grants() WHERE ns = 9301 AND id = 2;

-- The holder's row of fenced_locks, or none (0.4.0's fenced_lock_holder).
SELECT ns, id, token = :t1 AS token_matches, scope FROM (SELECT * FROM fenced_locks WHERE granted AND ns = 9301 AND id = 1) AS holder;
SELECT count(*) AS nobody FROM (SELECT * FROM fenced_locks WHERE granted AND ns = 9301 AND id = 99) AS holder;
COMMIT;
SELECT count(*) AS after_commit FROM fenced_locks;
SELECT count(*) AS grants_after_commit FROM fenced_lock_internal.fenced_lock_grants();

-- Session scope, until released.
SELECT acquire_fenced_session(9301, 3) AS s3 \gset
SELECT scope, token = :s3 AS token_matches FROM fenced_locks WHERE ns = 9301 AND id = 3;
SELECT release_fenced(9301, 3);
SELECT count(*) AS after_release FROM fenced_locks WHERE ns = 9301 AND id = 3;

-- Two namespaces with the same ids are kept apart.
SELECT register_namespace('inspect-b', 9302) AS ns_b;
BEGIN;
SELECT acquire_fenced_named('inspect', 'same') > 0, acquire_fenced_named('inspect-b', 'same') > 0;
SELECT namespace, id = fenced_key('same') AS hashed_id, scope FROM fenced_locks ORDER BY ns;
COMMIT;

-- A freed slot is taken again by this backend's next grant (a withdrawal clears only the
-- grant's live mark): every grant shows its own key text and owner, whole, never a longer
-- one's rest.
SELECT acquire_fenced_session(9301, 6, owner => repeat('o', 64)) > 0 AS owned_64;
SELECT key IS NULL AS no_key, owner = repeat('o', 64) AS owner_whole
  FROM fenced_lock_internal.fenced_lock_grants() WHERE ns = 9301 AND id = 6;
SELECT release_fenced(9301, 6, repeat('o', 64));
BEGIN;
SELECT acquire_fenced_named('inspect', repeat('k', 64)) > 0 AS named_64;
SELECT key = repeat('k', 64) AS key_whole, owner IS NULL AS no_owner
  FROM fenced_lock_internal.fenced_lock_grants() WHERE ns = 9301;
COMMIT;
SELECT acquire_fenced_session(9301, 7, owner => 'x') > 0 AS owned_short;
SELECT key IS NULL AS no_key, owner AS short_owner FROM fenced_lock_internal.fenced_lock_grants() WHERE ns = 9301;
SELECT release_fenced(9301, 7, 'x');
BEGIN;
SELECT acquire_fenced_named('inspect', 'ab') > 0 AS named_short;
SELECT key AS short_key, owner IS NULL AS no_owner FROM fenced_lock_internal.fenced_lock_grants() WHERE ns = 9301;
COMMIT;

-- More grants than the table holds (max_grants on this server is 64): every acquisition
-- succeeds, and the view shows the grants it could not publish with a NULL token, never a
-- wrong one.
BEGIN;
SELECT count(acquire_fenced(9303, g)) AS acquired FROM pg_catalog.generate_series(1, 100) g;
SELECT count(*) AS locks, count(token) AS with_token, count(*) - count(token) AS token_unknown
  FROM fenced_locks WHERE ns = 9303;
SELECT bool_and(token = current_fence(ns, id)) AS published_tokens_right
  FROM fenced_locks WHERE ns = 9303 AND token IS NOT NULL;
COMMIT;
SELECT count(*) AS grants_left FROM fenced_lock_internal.fenced_lock_grants();
-- The same with acquire_fenced_all, which publishes its keys together: 40 single grants, then
-- 50 keys in one call, of which 24 fit; every key of the call shows its one token or none.
-- After the commit the table is empty again, and a call of 64 keys publishes every one.
BEGIN;
SELECT count(acquire_fenced(9303, g)) AS acquired FROM pg_catalog.generate_series(1, 40) g;
SELECT acquire_fenced_all(9303, ARRAY(SELECT pg_catalog.generate_series(101, 150))) AS t_all \gset
SELECT count(*) AS locks, count(token) AS with_token,
       count(*) FILTER (WHERE id > 100 AND token IS NOT NULL) AS of_the_call_with_token,
       bool_and(token = :t_all) FILTER (WHERE id > 100) AS the_call_token
  FROM fenced_locks WHERE ns = 9303;
COMMIT;
SELECT count(*) AS grants_left FROM fenced_lock_internal.fenced_lock_grants();
BEGIN;
SELECT acquire_fenced_all(9303, ARRAY(SELECT pg_catalog.generate_series(201, 264))) > 0 AS acquired;
SELECT count(*) AS locks, count(token) AS with_token FROM fenced_locks WHERE ns = 9303;
COMMIT;
SELECT count(*) AS grants_left FROM fenced_lock_internal.fenced_lock_grants();
DELETE FROM fenced_namespaces;

-- Every role can read the view.
CREATE ROLE fenced_viewer;
SET ROLE fenced_viewer;
SELECT count(*) AS readable FROM fenced_locks;
RESET ROLE;
DROP ROLE fenced_viewer;
