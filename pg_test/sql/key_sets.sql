-- Many keys in one call: acquire_fenced_all, try_acquire_fenced_all and the named forms take
-- every key once, show each in fenced_locks with one token, and refuse bad input with a
-- SQLSTATE. Contention (order, all or none) is in specs/key_set_orders.spec.
\set VERBOSITY terse
CREATE TEMP TABLE seen (label text, token bigint);

-- Every key once, whatever the order and the duplicates; one token for all of them.
BEGIN;
INSERT INTO seen SELECT 'all', acquire_fenced_all(4300, '{3,1,2,1}');
SELECT count(*) AS keys, count(DISTINCT token) AS tokens,
       bool_and(token = (SELECT token FROM seen WHERE label = 'all')) AS the_call_s,
       array_agg(id ORDER BY id) AS ids, bool_and(scope = 'transaction') AS transaction_scope
  FROM fenced_locks WHERE ns = 4300 AND pid = pg_backend_pid();
SELECT bool_and(current_fence(4300, id) = (SELECT token FROM seen WHERE label = 'all'))
       AS current_fence_answers
  FROM unnest('{1,2,3}'::int[]) id;
COMMIT;
SELECT count(*) AS left_after_commit FROM fenced_locks WHERE ns = 4300;

-- The token is larger than every earlier grant of any key, and the next set's is larger still.
BEGIN;
INSERT INTO seen SELECT 'single', acquire_fenced(4300, 2);
COMMIT;
BEGIN;
INSERT INTO seen SELECT 'overlap', acquire_fenced_all(4300, ARRAY[2, 4]);
COMMIT;
SELECT (SELECT token FROM seen WHERE label = 'all') < (SELECT token FROM seen WHERE label = 'single')
   AND (SELECT token FROM seen WHERE label = 'single') < (SELECT token FROM seen WHERE label = 'overlap')
       AS tokens_rise;

-- A key the transaction already holds keeps its grant and token; the new token is larger.
BEGIN;
INSERT INTO seen SELECT 'held', acquire_fenced(4300, 5);
INSERT INTO seen SELECT 'with_held', acquire_fenced_all(4300, '{5,6}');
SELECT current_fence(4300, 5) = (SELECT token FROM seen WHERE label = 'held') AS held_keeps_token,
       current_fence(4300, 6) = (SELECT token FROM seen WHERE label = 'with_held') AS new_key_new_token,
       (SELECT token FROM seen WHERE label = 'with_held') > (SELECT token FROM seen WHERE label = 'held')
           AS larger;
-- All held: the largest held token, no new one.
SELECT acquire_fenced_all(4300, '{6,5}') = (SELECT token FROM seen WHERE label = 'with_held')
       AS repeat_returns_held;
COMMIT;

-- A savepoint rolled back releases what the call took in it.
BEGIN;
SAVEPOINT s;
SELECT acquire_fenced_all(4300, '{7,8}') > 0 AS taken;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS after_rollback FROM fenced_locks WHERE ns = 4300 AND pid = pg_backend_pid();
SELECT count(*) AS advisory_locks FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 4300 AND pid = pg_backend_pid();
COMMIT;

-- The try form on free keys, the timeout form, a zero timeout.
BEGIN;
SELECT try_acquire_fenced_all(4300, '{9,10}') > 0 AS tried,
       acquire_fenced_all(4300, '{11}', '1 s') > 0 AS within,
       acquire_fenced_all(4300, '{12,13}', '0') > 0 AS zero_timeout;
SELECT count(*) AS keys FROM fenced_locks WHERE ns = 4300 AND pid = pg_backend_pid();
COMMIT;

-- Named keys: the keys' text shows in fenced_locks.
SELECT register_namespace('key_sets', 4310) AS registered;
BEGIN;
SELECT acquire_fenced_all_named('key_sets', '{transfer:b,transfer:a}') > 0 AS named;
SELECT try_acquire_fenced_all_named('key_sets', '{transfer:c}') > 0 AS named_try,
       acquire_fenced_all_named('key_sets', '{transfer:d}', '1 s') > 0 AS named_within;
SELECT key, id = fenced_key(key) AS hashed FROM fenced_locks WHERE namespace = 'key_sets' ORDER BY key;
SELECT count(DISTINCT token) AS one_token_for_a_and_b
  FROM fenced_locks WHERE namespace = 'key_sets' AND key IN ('transfer:a', 'transfer:b');
COMMIT;

-- A key this session holds at session scope: 55000, as acquire_fenced.
SELECT acquire_fenced_session(4300, 20) > 0 AS session_lock;
BEGIN;
SELECT acquire_fenced_all(4300, '{19,20}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT release_fenced(4300, 20) AS released;

-- Bad input: a SQLSTATE each, never a NULL that reads as busy.
SELECT acquire_fenced_all(4300, '{1}');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT acquire_fenced_all(NULL, '{1}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced_all(4300, NULL);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT try_acquire_fenced_all(4300, '{}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced_all(4300, '{1,NULL}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced_all(4300, ARRAY(SELECT generate_series(1, 1001)));
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced_all(4300, '{1}', '-1 s');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced_all(4300, '{1}', NULL) > 0 AS null_timeout_waits_without_limit;
ROLLBACK;
BEGIN;
SELECT acquire_fenced_all_named('key_sets', '{a,NULL}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced_all_named('no_such_namespace', '{a}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- Many keys at once (1000 is the limit).
BEGIN;
SELECT acquire_fenced_all(4301, ARRAY(SELECT generate_series(1, 200))) > 0 AS many;
SELECT count(*) AS keys FROM fenced_locks WHERE ns = 4301 AND pid = pg_backend_pid();
ROLLBACK;
DELETE FROM fenced_namespaces WHERE name = 'key_sets';
