-- advance_fencing_tokens: the way out when a resource has accepted tokens this server never
-- issued (a split brain whose discarded side handed out the higher ones, a restore from an
-- older backup). SF001 tells such a refusal from a late holder's.
\set SHOW_CONTEXT never
\set VERBOSITY default
BEGIN;
SELECT acquire_fenced(5150, 1) AS before \gset
COMMIT;
-- Forward past a token two blocks above (fenced_lock.token_block is 10000): every token after
-- it is above that one, the shared allocator's current block included (the server is
-- preloaded). Only 20 ms of the clock ahead, which later tests' new sequences start at.
SELECT advance_fencing_tokens(:before + 20000) = :before + 20000 AS moved_to_past;
BEGIN;
SELECT acquire_fenced(5150, 1) > :before + 20000 AS grant_above;
COMMIT;
SELECT new_fencing_token() > :before + 20000 AS token_above;
-- Never back: a lower value leaves the sequence where it is, and says where that is.
SELECT new_fencing_token() AS latest \gset
SELECT advance_fencing_tokens(1) > :latest AS not_moved_back;
SELECT new_fencing_token() > :latest AS still_rising;
-- No silent NULL.
SELECT advance_fencing_tokens(NULL);
\echo :LAST_ERROR_SQLSTATE
-- A write, not on a read-only transaction.
BEGIN READ ONLY;
SELECT advance_fencing_tokens(1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- The owner's only: not executable by PUBLIC, and a role granted EXECUTE still needs the
-- sequence's privileges.
CREATE ROLE fenced_advance_role;
SET ROLE fenced_advance_role;
SELECT advance_fencing_tokens(1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION advance_fencing_tokens(bigint) TO fenced_advance_role;
SET ROLE fenced_advance_role;
SELECT advance_fencing_tokens(1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE EXECUTE ON FUNCTION advance_fencing_tokens(bigint) FROM fenced_advance_role;
DROP ROLE fenced_advance_role;
-- A refusal by more than fenced_lock.failover_skip (1000000000) names the cause and the way
-- out; a refusal by less is a late holder's.
SELECT fence_check('advance://report', 5000000000);
SELECT fence_check('advance://report', 3999999999);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check('advance://report', 4000000000);
\echo :LAST_ERROR_SQLSTATE
-- fence_check returns false either way, with the same report as a WARNING when the tokens
-- went back (to the caller and the server's log).
SELECT fence_check_or_false('advance://report', 1000) AS accepted;
SELECT fence_check_or_false('advance://report', 4500000000) AS accepted;
CREATE TABLE advance_jobs (id int PRIMARY KEY, fence bigint, state text);
INSERT INTO advance_jobs VALUES (1, 7000000000, 'written by the discarded side');
SELECT fenced_update('advance_jobs', 1, 2000000000, '{"state": "refused"}');
\echo :LAST_ERROR_SQLSTATE
-- fenced_update too (false, and the WARNING); a late holder's refusal warns of nothing.
SELECT fenced_update_or_false('advance_jobs', 1, 2000000000, '{"state": "refused"}') AS updated;
SELECT fenced_update_or_false('advance_jobs', 1, 6999999999, '{"state": "refused"}') AS updated;
DROP TABLE advance_jobs;
DELETE FROM fence_ledger WHERE resource = 'advance://report';

-- A sentinel (third review of 0.3.0, "also check"): moving the tokens near bigint's end would
-- make every later draw fail, so a `past` above 2^62 is refused (22023, the HINT says why)
-- and the sequence stays where it was; the SF001 HINT for such a resource says the same
-- instead of suggesting the call.
SELECT last_value AS before_refusal FROM fencing_token_seq \gset
SELECT advance_fencing_tokens(9223372036854775000);
\echo :LAST_ERROR_SQLSTATE
SELECT advance_fencing_tokens((2 ^ 62)::bigint + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT last_value = :before_refusal AS sequence_unmoved FROM fencing_token_seq;
SELECT advance_fencing_tokens(:before_refusal) >= :before_refusal AS below_the_bound_works;
INSERT INTO fence_ledger VALUES ('advance://sentinel', 9223372036854775807, now());
SELECT fence_check('advance://sentinel', 5000000000);
\echo :LAST_ERROR_SQLSTATE
DELETE FROM fence_ledger WHERE resource = 'advance://sentinel';
