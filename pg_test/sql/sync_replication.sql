-- With synchronous standbys configured, a token is returned only once the synchronous
-- standby confirmed its WAL, whatever the session's synchronous_commit. This test names a
-- standby ('nobody') that never connects, so the wait can only end by cancellation: then the
-- call fails with 57014, never returns the token. Tokens come from blocks reserved ahead
-- (fenced_lock.token_block), each confirmed by the standby before its first token is
-- returned; moving the sequence (as its owner may) makes the next token reserve a new block.
\set SHOW_CONTEXT never
-- A block of its own (token_block is 10000), drawn up to the number before its middle while
-- no standby is named.
SELECT advance_fencing_tokens(last_value + 1) AS base FROM fencing_token_seq \gset
SELECT max(new_fencing_token()) = :base + 5000 AS before_the_middle
FROM pg_catalog.generate_series(1, 5000);
ALTER SYSTEM SET synchronous_standby_names = 'nobody';
SELECT pg_catalog.pg_reload_conf();
-- The checkpointer publishes the new setting to the walsenders' shared state.
SELECT pg_catalog.pg_sleep(1);
SHOW synchronous_standby_names;

SET statement_timeout = '300ms';
-- The middle number reserves the next block without waiting for its WAL (this session's
-- commits wait for the local flush only), and the rest of the current block, confirmed
-- before, is handed out.
SET synchronous_commit = local;
SELECT new_fencing_token() = :base + 5001 AS the_middle_without_waiting;
SELECT last_value = :base + 20000 AS reserved_ahead FROM fencing_token_seq;
SELECT max(new_fencing_token()) = :base + 10000 AS rest_of_the_block
FROM pg_catalog.generate_series(1, 4999);
-- The block reserved ahead is confirmed by the standby before its first token is returned:
-- cancelled (57014), and again on the next try; no token of it comes out.
SELECT new_fencing_token();
\echo :LAST_ERROR_SQLSTATE
SELECT new_fencing_token();
\echo :LAST_ERROR_SQLSTATE
SELECT last_value = :base + 20000 AS still_that_block FROM fencing_token_seq;
RESET synchronous_commit;
RESET statement_timeout;

SET statement_timeout = '300ms';
SET synchronous_commit = on;
BEGIN;
SELECT pg_catalog.setval('fencing_token_seq', last_value + 1) > 0 AS moved FROM fencing_token_seq;
SELECT acquire_fenced(9001, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- The failed grant's lock went with the aborted transaction.
SELECT count(*) AS held FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();

-- Any role may turn synchronous_commit down for its commits; the token still waits (a
-- failover could issue a token the standby never saw), and the setting is the session's again
-- afterwards.
SET synchronous_commit = local;
BEGIN;
SELECT pg_catalog.setval('fencing_token_seq', last_value + 1) > 0 AS moved FROM fencing_token_seq;
SELECT acquire_fenced(9001, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SHOW synchronous_commit;
SET synchronous_commit = off;
BEGIN;
SELECT pg_catalog.setval('fencing_token_seq', last_value + 1) > 0 AS moved FROM fencing_token_seq;
SELECT acquire_fenced(9001, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SHOW synchronous_commit;
RESET statement_timeout;
RESET synchronous_commit;

ALTER SYSTEM RESET synchronous_standby_names;
SELECT pg_catalog.pg_reload_conf();
SELECT pg_catalog.pg_sleep(1);
-- Without synchronous standbys there is nothing to wait for.
BEGIN;
SELECT acquire_fenced(9001, 1) > 0 AS token_without_waiting;
COMMIT;
-- The owner's setval forward is noticed at the next token: never a token below it.
SELECT pg_catalog.setval('fencing_token_seq', last_value + 5000) AS moved_to
  FROM fencing_token_seq \gset
BEGIN;
SELECT acquire_fenced(9001, 2) > :moved_to AS above_the_new_value;
COMMIT;
