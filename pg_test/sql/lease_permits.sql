-- Lease semaphores: a permit of a key's lease for an owner and a TTL, as one row (slot, token),
-- renewed and released by token as any lease. Every call commits on its own (autocommit), as
-- through a transaction-mode pooler.
\set SHOW_CONTEXT never
\set VERBOSITY default

-- Arguments: permits within 1..4096 (22023), every one required (22004), wait not negative.
SELECT * FROM try_acquire_lease_permit(7801, 1, 0, 'a', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM try_acquire_lease_permit(7801, 1, 4097, 'a', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM try_acquire_lease_permit(7801, 1, NULL, 'a', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM try_acquire_lease_permit(7801, 1, 2, NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM try_acquire_lease_permit(7801, 1, 2, 'a', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM acquire_lease_permit(7801, 1, 2, 'a', '1 minute', '-1 s');
\echo :LAST_ERROR_SQLSTATE

-- Owners take the lowest free slots, each with a new, larger token; the same owner again gets
-- its own row back, the TTL extended.
SELECT new_fencing_token() AS before \gset
SELECT slot AS slot_a, token AS ta FROM try_acquire_lease_permit(7801, 1, 3, 'a', '1 minute') \gset
SELECT slot AS slot_b, token AS tb FROM try_acquire_lease_permit(7801, 1, 3, 'b', '1 minute') \gset
SELECT slot AS slot_c, token AS tc FROM try_acquire_lease_permit(7801, 1, 3, 'c', '1 minute') \gset
SELECT :slot_a AS a, :slot_b AS b, :slot_c AS c, :before < :ta AND :ta < :tb AND :tb < :tc AS rising;
SELECT expires_at AS b_expiry FROM fenced_leases WHERE ns = 7801 AND slot = 2 \gset
SELECT slot, token = :tb AS same_token FROM try_acquire_lease_permit(7801, 1, 3, 'b', '2 minutes');
SELECT expires_at > :'b_expiry' AS extended FROM fenced_leases WHERE ns = 7801 AND slot = 2;
-- All taken: no row (not a NULL row) without waiting; 55P03 after a wait.
SELECT count(*) AS no_row FROM try_acquire_lease_permit(7801, 1, 3, 'd', '1 minute');
SELECT count(*) FROM acquire_lease_permit(7801, 1, 3, 'd', '1 minute', '30 ms');
\echo :LAST_ERROR_SQLSTATE
-- fenced_leases: a row per permit, with its slot.
SELECT id, slot, owner, token = CASE slot WHEN 1 THEN :ta WHEN 2 THEN :tb ELSE :tc END AS token
  FROM fenced_leases WHERE ns = 7801 ORDER BY slot;

-- Renew and release by token, as any lease; a token of another slot or key does nothing.
SELECT renew_lease(7801, 1, :tb, '5 minutes') > clock_timestamp() + interval '4 minutes'
       AS renewed;
SELECT renew_lease(7801, 2, :tb, '5 minutes') IS NULL AS other_key_null;
SELECT release_lease(7801, 1, :ta) AS released, release_lease(7801, 1, :ta) AS released_again;
SELECT renew_lease(7801, 1, :ta, '1 minute') IS NULL AS renew_after_release_null;
-- The freed slot 1 goes to the next owner, with a token above every earlier one.
SELECT slot, token > :tc AS larger FROM try_acquire_lease_permit(7801, 1, 3, 'd', '1 minute');

-- Expiry: a permit whose TTL ran out goes to the next owner with a larger token; the old
-- holder's renew then fails, and a table keyed by slot refuses its token.
CREATE TABLE lease_permit_rows (id int PRIMARY KEY, fence bigint, worker text);
INSERT INTO lease_permit_rows VALUES (1, NULL, NULL);
SELECT slot AS e_slot, token AS e1 FROM try_acquire_lease_permit(7802, 1, 1, 'old', '20 ms') \gset
SELECT fenced_update_or_false('lease_permit_rows', :e_slot, :e1, '{"worker": "old"}') AS old_wrote;
SELECT pg_sleep(0.05);
SELECT slot AS e_slot2, token AS e2 FROM try_acquire_lease_permit(7802, 1, 1, 'new', '1 minute') \gset
SELECT :e_slot2 AS slot, :e2 > :e1 AS takeover_larger_token;
SELECT fenced_update_or_false('lease_permit_rows', :e_slot2, :e2, '{"worker": "new"}') AS new_wrote;
SELECT renew_lease(7802, 1, :e1, '1 minute') IS NULL AS old_renew_null;
SELECT fenced_update_or_false('lease_permit_rows', :e_slot, :e1, '{"worker": "old"}') AS old_refused;
SELECT worker FROM lease_permit_rows;
-- A waiting acquire gets a slot when a holder's TTL runs out within its wait.
SELECT token AS w1 FROM try_acquire_lease_permit(7802, 2, 1, 'short', '30 ms') \gset
SELECT slot, token > :w1 AS larger
  FROM acquire_lease_permit(7802, 2, 1, 'waiter', '1 minute', '5 s');

-- Fewer permits: a holder above the new count keeps its slot; no grant goes above it.
SELECT slot FROM try_acquire_lease_permit(7803, 1, 3, 'x', '1 minute');
SELECT slot FROM try_acquire_lease_permit(7803, 1, 3, 'y', '1 minute');
SELECT slot AS z_slot, token AS tz FROM try_acquire_lease_permit(7803, 1, 3, 'z', '1 minute') \gset
SELECT count(*) AS none_of_two FROM try_acquire_lease_permit(7803, 1, 2, 'w', '1 minute');
-- z keeps slot 3 when it asks with the smaller count too.
SELECT slot, token = :tz AS same FROM try_acquire_lease_permit(7803, 1, 2, 'z', '1 minute');
SELECT release_lease(7803, 1, :tz) AS released;
SELECT count(*) AS still_none_of_two FROM try_acquire_lease_permit(7803, 1, 2, 'w', '1 minute');
-- An owner whose permit above the new count expired is not granted that slot again (fourth
-- review of 0.4.0, item 6: it got slot 3 with a new token, a third live holder of two permits).
SELECT slot FROM try_acquire_lease_permit(7806, 1, 3, 'x', '1 minute');
SELECT slot FROM try_acquire_lease_permit(7806, 1, 3, 'y', '1 minute');
SELECT slot FROM try_acquire_lease_permit(7806, 1, 3, 'z', '20 ms');
SELECT pg_sleep(0.05);
SELECT count(*) AS none_of_two_after_expiry FROM try_acquire_lease_permit(7806, 1, 2, 'z', '1 minute');
SELECT count(*) AS live_holders FROM fenced_leases WHERE ns = 7806 AND id = 1 AND NOT expired;
-- Once a slot within the count comes free, the owner gets it, with a new token.
SELECT release_lease(7806, 1, token) AS released FROM fenced_leases WHERE ns = 7806 AND id = 1 AND owner = 'y';
SELECT slot FROM try_acquire_lease_permit(7806, 1, 2, 'z', '1 minute');

-- The key's lease and its permits are separate leases (slot 0 and slots 1..).
SELECT try_acquire_lease(7803, 1, 'x', '1 minute') IS NOT NULL AS lease_of_the_key;
SELECT slot FROM fenced_leases WHERE ns = 7803 AND owner = 'x' ORDER BY slot;

-- Named keys: (registered id, fenced_key(key)); a bigint key is its decimal text.
SELECT register_namespace('api_licences', 7804) AS api_ns;
SELECT slot, token AS named_token
  FROM try_acquire_lease_permit_named('api_licences', 'geo', 5, 'a', '1 minute') \gset
SELECT slot, token = :named_token AS same
  FROM acquire_lease_permit_named('api_licences', 'geo', 5, 'a', '1 minute', '0');
SELECT namespace, key, id = fenced_key('geo') AS hashed, slot FROM fenced_leases WHERE ns = 7804;
SELECT slot FROM try_acquire_lease_permit_named('api_licences', 42::text, 5, 'a', '1 minute');
SELECT key, slot FROM fenced_leases WHERE ns = 7804 AND id = fenced_key('42');

-- A read-only transaction writes no lease: 25006 before looking.
BEGIN READ ONLY;
SELECT * FROM try_acquire_lease_permit(7805, 1, 2, 'a', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- The namespace goes, so that later tests see only theirs.
DELETE FROM fenced_namespaces WHERE ns = 7804;
