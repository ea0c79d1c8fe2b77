-- Fenced counting semaphores: a key has `permits` slots; a holder gets one slot and a fresh
-- token. One session plays several clients through owners (as a pooler's server session
-- does); waiting, wake-ups and arrival order are in specs/permit_waits.spec.
\set SHOW_CONTEXT never
\set VERBOSITY default

-- Arguments: required ones 22004 when NULL (a NULL timeout or owner is the default); permits
-- and slot within 1..4096 (22023).
BEGIN;
SELECT * FROM acquire_permit(7601, 1, NULL);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT * FROM acquire_permit(7601, 1, 0);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT * FROM try_acquire_permit(7601, 1, 4097);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT slot AS null_timeout_no_limit FROM acquire_permit(7601, 1, 2, NULL);
ROLLBACK;
SELECT slot AS null_owner_is_none FROM acquire_permit_session(7601, 1, 2, owner => NULL);
SELECT release_permit(7601, 1, 1) AS released_without_owner;
SELECT release_permit(7601, 1, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT release_permit(7601, 1, NULL);
\echo :LAST_ERROR_SQLSTATE
-- A transaction-scoped permit outside a transaction block would end with its statement.
SELECT * FROM acquire_permit(7601, 1, 2);
\echo :LAST_ERROR_SQLSTATE

-- Transaction scope: slot 1 first, a token above every earlier one; taken again, the same row.
BEGIN;
SELECT new_fencing_token() AS before \gset
SELECT slot, token AS t1 FROM acquire_permit(7601, 1, 3) \gset
SELECT :slot AS slot, :t1 > :before AS token_above_earlier;
SELECT slot, token = :t1 AS same_token FROM acquire_permit(7601, 1, 3);
SELECT slot, token = :t1 AS same_token FROM try_acquire_permit(7601, 1, 3);
SELECT slot, token = :t1 AS same_token FROM acquire_permit(7601, 1, 3, '0');
-- fenced_locks shows the permit with its slot and token; pg_locks the user lock behind it.
SELECT ns, id, granted, scope, mode, slot, token = :t1 AS token FROM fenced_locks
 WHERE ns = 7601;
SELECT locktype, classid, objid, objsubid, mode, granted FROM pg_catalog.pg_locks
 WHERE locktype = 'userlock' AND classid = 7601;
COMMIT;
-- Ended with the transaction: the next grant of slot 1 has a larger token.
SELECT count(*) AS held_after_commit FROM fenced_locks WHERE ns = 7601;
BEGIN;
SELECT slot, token > :t1 AS larger_token FROM acquire_permit(7601, 1, 3);
-- A savepoint's rollback releases a permit taken in it.
SAVEPOINT s1;
SELECT slot, token AS in_savepoint FROM acquire_permit(7601, 2, 1) \gset
ROLLBACK TO SAVEPOINT s1;
SELECT count(*) AS released_with_savepoint FROM fenced_locks WHERE ns = 7601 AND id = 2;
SELECT slot, token > :in_savepoint AS new_token FROM acquire_permit(7601, 2, 1);
COMMIT;

-- Session scope with owners: each owner one slot of the key, the lowest free one.
SELECT slot, token AS ta FROM acquire_permit_session(7602, 1, 3, owner => 'a') \gset
SELECT slot AS slot_b, token AS tb FROM acquire_permit_session(7602, 1, 3, owner => 'b') \gset
SELECT slot AS slot_c, token AS tc FROM try_acquire_permit_session(7602, 1, 3, 'c') \gset
SELECT :slot AS slot_a, :slot_b AS slot_b, :slot_c AS slot_c, :ta < :tb AND :tb < :tc AS rising;
-- All three taken: the try form returns no row (not a NULL row), a zero timeout 55P03. All
-- three by this session: a form that would wait is refused at once (55000), as only this
-- session could free a permit (fourth review of 0.4.0, item 3: it waited for itself).
SELECT count(*) AS try_rows FROM try_acquire_permit_session(7602, 1, 3, 'd');
SELECT count(*) AS timeout_rows FROM acquire_permit_session(7602, 1, 3, '20ms', 'd');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS zero_timeout_rows
  FROM acquire_permit_session(7602, 1, 3, '0', 'd');
\echo :LAST_ERROR_SQLSTATE
-- An owner taking its key again gets its own row back.
SELECT slot, token = :tb AS same FROM acquire_permit_session(7602, 1, 3, owner => 'b');
-- A transaction permit of this session does not take a slot this session holds for an owner
-- (the lock manager would grant it again): with 4 permits it gets slot 4, with 3 none.
BEGIN;
SELECT count(*) AS no_slot_of_three FROM try_acquire_permit(7602, 1, 3);
SELECT slot FROM try_acquire_permit(7602, 1, 4);
ROLLBACK;
SELECT owner, slot, scope, mode FROM fenced_locks WHERE ns = 7602 ORDER BY slot;

-- Release: only the owner, only the slot it holds (false with a WARNING otherwise).
SELECT release_permit(7602, 1, 1, 'b') AS wrong_owner;
SELECT release_permit(7602, 1, 1) AS no_owner;
SELECT release_permit(7602, 1, 4, 'a') AS not_held;
BEGIN;
SELECT slot AS tx_slot FROM acquire_permit(7603, 1, 1) \gset
SELECT release_permit(7603, 1, :tx_slot) AS transaction_permit;
ROLLBACK;
SELECT release_permit(7602, 1, 1, 'a') AS released;

-- Fewer permits: holders above the new count keep their slot; no grant goes above it.
SELECT slot, token > :tc AS fresh FROM acquire_permit_session(7602, 1, 2, owner => 'e');
SELECT count(*) AS none_of_two FROM try_acquire_permit_session(7602, 1, 2, 'f');
SELECT owner, slot FROM fenced_locks WHERE ns = 7602 ORDER BY slot;
-- More permits: the new slots are free at once.
SELECT slot FROM try_acquire_permit_session(7602, 1, 4, 'f');

-- release_all_fenced(owner) releases that owner's permits too.
SELECT release_all_fenced('b') AS released_for_b;
SELECT slot FROM try_acquire_permit_session(7602, 1, 3, 'g');
-- pg_advisory_unlock_all (what DISCARD ALL runs) releases every session permit: they are
-- forgotten, and an owner taking its key again gets a new token.
SELECT pg_catalog.pg_advisory_unlock_all();
SELECT count(*) AS left_after_unlock_all FROM fenced_locks WHERE ns = 7602 AND granted;
SELECT slot, token > :tc AS new_token FROM acquire_permit_session(7602, 1, 3, owner => 'c');
SELECT release_permit(7602, 1, 1, 'c') AS released;

-- Without an owner, at session scope: a permit goes back to no one (behind a pooler the
-- caller may be another client), so each call takes a slot of its own.
SELECT slot AS s1, token AS st FROM acquire_permit_session(7604, 1, 2) \gset
SELECT slot, token > :st AS own_token FROM try_acquire_permit_session(7604, 1, 2);
SELECT count(*) AS none_left FROM acquire_permit_session(7604, 1, 2, '0');
SELECT release_permit(7604, 1, :s1) AS released, release_permit(7604, 1, :s1) AS again;
SELECT release_permit(7604, 1, 2) AS released_second;

-- Named keys: (registered id, fenced_key(key)); a bigint key is its decimal text.
SELECT register_namespace('licences', 7605) AS licences_ns;
BEGIN;
SELECT slot, token AS named_token FROM acquire_permit_named('licences', 'geo-api', 5) \gset
SELECT slot, token = :named_token AS same_key
  FROM try_acquire_permit_named('licences', 'geo-api', 5);
SELECT namespace, key, id = fenced_key('geo-api') AS hashed, slot FROM fenced_locks
 WHERE ns = 7605;
SELECT slot FROM acquire_permit_named('licences', 42::text, 5);
SELECT key, slot FROM fenced_locks WHERE ns = 7605 AND id = fenced_key('42');
COMMIT;
SELECT * FROM acquire_permit_session_named('nowhere', 'k', 2, owner => 'a');
\echo :LAST_ERROR_SQLSTATE

-- Permits and the key's own lock are separate locks.
BEGIN;
SELECT acquire_fenced(7606, 1) IS NOT NULL AS locked;
SELECT slot FROM try_acquire_permit(7606, 1, 1);
COMMIT;

-- DISCARD ALL (a pooler's reset between clients) releases a session permit behind fenced_lock's
-- back: the backend takes the slot again (fourth review of 0.4.0, item 4: it never did, and its
-- wait held the key's line for every backend).
SELECT slot AS discarded_slot, token AS discarded_token
  FROM acquire_permit_session(7607, 1, 1) \gset
DISCARD ALL;
SELECT count(*) AS permits_left FROM pg_catalog.pg_locks
 WHERE locktype = 'userlock' AND pid = pg_catalog.pg_backend_pid();
SELECT slot, token > :discarded_token AS new_token
  FROM try_acquire_permit_session(7607, 1, 1);
SELECT slot FROM acquire_permit_session(7607, 1, 2, '100 ms');
SELECT release_permit(7607, 1, 1) AND release_permit(7607, 1, 2) AS released;
