-- Happy paths of the transaction-scoped API: tokens, re-acquire, release, pg_locks.
\set SHOW_CONTEXT never

-- Every function is there, with the documented signature.
SELECT p.oid::regprocedure AS function, pg_catalog.format_type(p.prorettype, NULL) AS returns,
       p.proisstrict AS strict, p.provolatile AS volatility, p.proparallel AS parallel
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'fenced_lock')
   AND d.deptype = 'e'
 ORDER BY p.oid::regprocedure::text;

-- The token sequence: bigint, CACHE 1, NO CYCLE.
SELECT seqtypid::regtype, seqcache, seqcycle, seqincrement
  FROM pg_catalog.pg_sequence WHERE seqrelid = 'fencing_token_seq'::regclass;

-- Tokens rise across keys and calls.
BEGIN;
SELECT acquire_fenced(1001, 42) AS t1 \gset
SELECT acquire_fenced(1001, 43) AS t2 \gset
SELECT try_acquire_fenced(1001, 44) AS t3 \gset
SELECT acquire_fenced(1001, 45, '1 second') AS t4 \gset
SELECT acquire_fenced(1001, 46, '0') AS t5 \gset
SELECT :t1 > 0 AS positive, :t1 < :t2 AND :t2 < :t3 AND :t3 < :t4 AND :t4 < :t5 AS rising;

-- Re-acquiring a held key, by any of the functions, is the same grant with the same token.
SELECT acquire_fenced(1001, 42) = :t1 AS same_token,
       try_acquire_fenced(1001, 42) = :t1 AS try_same_token,
       acquire_fenced(1001, 42, '0') = :t1 AS zero_timeout_same_token;

-- The lock is the built-in two-int4 advisory lock: classid = ns, objid = id, objsubid = 2,
-- exclusive.
SELECT locktype, classid, objid, objsubid, mode, granted
  FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()
 ORDER BY objid;

-- Keys are namespaced: (1001, 42) and (1002, 42) are different locks with different tokens.
SELECT acquire_fenced(1002, 42) > :t5 AS other_namespace_new_token;

-- Negative keys are kept as given; pg_locks shows them unsigned.
SELECT acquire_fenced(-1, -2) > 0 AS negative_key;
SELECT classid, objid FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() AND classid = 4294967295;
COMMIT;

-- COMMIT released every key.
SELECT count(*) AS advisory_locks_after_commit
  FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();

-- A new transaction gets a new, larger token for the same key.
BEGIN;
SELECT acquire_fenced(1001, 42) > :t5 AS next_transaction_larger;
ROLLBACK;

-- ROLLBACK released it too.
SELECT count(*) AS advisory_locks_after_rollback
  FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();

-- Savepoints: a grant rolled back with its savepoint is released, and its token forgotten.
BEGIN;
SAVEPOINT s1;
SELECT acquire_fenced(2001, 1) AS s1_token \gset
ROLLBACK TO SAVEPOINT s1;
SELECT count(*) AS held_after_rollback_to FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() AND classid = 2001;
SELECT acquire_fenced(2001, 1) AS after_rollback_to \gset
SELECT :after_rollback_to > :s1_token AS new_grant_new_token;

-- A released (committed) savepoint hands its grant to the parent: same token afterwards.
SAVEPOINT s2;
SELECT acquire_fenced(2001, 2) AS s2_token \gset
RELEASE SAVEPOINT s2;
SELECT acquire_fenced(2001, 2) = :s2_token AS kept_after_release;

-- ... and a rollback of an enclosing savepoint still releases it.
SAVEPOINT outer_sp;
SAVEPOINT inner_sp;
SELECT acquire_fenced(2001, 3) AS inner_token \gset
RELEASE SAVEPOINT inner_sp;
ROLLBACK TO SAVEPOINT outer_sp;
SELECT count(*) AS held_after_outer_rollback FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()
   AND classid = 2001 AND objid = 3;
SELECT acquire_fenced(2001, 3) > :inner_token AS outer_rollback_new_token;

-- A key taken before the savepoint survives its rollback, with its token.
SAVEPOINT s3;
SELECT acquire_fenced(2001, 1) = :after_rollback_to AS outer_grant_in_savepoint;
ROLLBACK TO SAVEPOINT s3;
SELECT acquire_fenced(2001, 1) = :after_rollback_to AS outer_grant_kept;
COMMIT;

-- A key taken with the built-in function first still gets a token from acquire_fenced.
BEGIN;
SELECT pg_catalog.pg_advisory_xact_lock(3001, 1);
SELECT acquire_fenced(3001, 1) > :t5 AS token_after_builtin;
COMMIT;

-- The sequence is found in the extension's schema, never through search_path.
CREATE SCHEMA decoy;
CREATE SEQUENCE decoy.fencing_token_seq START 1000000000;
SET search_path = decoy, public;
BEGIN;
SELECT acquire_fenced(1001, 42) AS from_own_sequence \gset
SELECT :from_own_sequence > :t5 AS ignores_search_path;
COMMIT;
RESET search_path;
SELECT pg_catalog.nextval('decoy.fencing_token_seq') AS decoy_untouched;
DROP SCHEMA decoy CASCADE;

-- PREPARE TRANSACTION hands the lock to the prepared transaction: this session no longer
-- holds it, so it must neither reuse the old token nor get the key while it stays prepared.
BEGIN;
SELECT acquire_fenced(4001, 1) AS prepared_token \gset
PREPARE TRANSACTION 'fenced_prepared';
BEGIN;
SELECT try_acquire_fenced(4001, 1) IS NULL AS busy_while_prepared;
SELECT acquire_fenced(4001, 1, '0');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
COMMIT PREPARED 'fenced_prepared';
BEGIN;
SELECT acquire_fenced(4001, 1) > :prepared_token AS larger_after_commit_prepared;
COMMIT;

-- new_fencing_token(): a token from the same sequence as every grant's, without a lock.
BEGIN;
SELECT acquire_fenced(1001, 60) AS granted_token \gset
SELECT new_fencing_token() AS lockless_token \gset
SELECT :lockless_token > :granted_token AS above_the_grant,
       new_fencing_token() > :lockless_token AS rising;
SELECT count(*) AS locks_besides_the_grant FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() AND objid <> 60;
COMMIT;
SELECT acquire_fenced_session(1001, 61) > :lockless_token AS later_grant_above,
       release_fenced(1001, 61) AS released;
-- In autocommit too (the one-statement claim), but not in a read-only transaction.
SELECT new_fencing_token() > :lockless_token AS autocommit_token;
BEGIN READ ONLY;
SELECT new_fencing_token();
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
