-- Third review of 0.3.0, items 2 and 4.
-- Item 2: a lease's TTL (at most 366 days) and the lock-delay (at most 1 day) are bounded,
-- 22023 above them, so that no lease call can write a row whose expiry and delay add up past
-- the end of time. A row that does anyway (the owner's own UPDATE, a row of an earlier
-- version) reads as available at 'infinity' and fails nobody's call: not fenced_leases, not
-- its holder's release, not another key's first lease, whose sweep reads it.
\set VERBOSITY terse
SET client_min_messages = warning;
-- (Only the SQLSTATE: PostgreSQL 18 words the range check's message with units.)
\set VERBOSITY sqlstate
SET fenced_lock.lease_lock_delay = '20d';
\set VERBOSITY terse
SET fenced_lock.lease_lock_delay = '1d';
SHOW fenced_lock.lease_lock_delay;
SELECT try_acquire_lease(9, 9, 'squatter', '294276-12-25 00:00:00+00'::timestamptz - now());
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_lease(9, 9, 'squatter', '367 days');
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_lease(9, 9, 'squatter', '1 year') IS NOT NULL AS a_year_is_within;
SELECT try_acquire_lease(9, 9, 'squatter', '366 days') IS NOT NULL AS at_the_maximum;
SELECT renew_lease(9, 9, (SELECT token FROM fenced_lease_state WHERE ns = 9 AND id = 9), '367 days');
\echo :LAST_ERROR_SQLSTATE
SELECT renew_lease(9, 9, (SELECT token FROM fenced_lease_state WHERE ns = 9 AND id = 9), '366 days') IS NOT NULL AS renewed_at_the_maximum;
RESET fenced_lock.lease_lock_delay;

-- The squatter's row, as 0.3.0 let it be written (and as the owner still can by hand).
UPDATE fenced_lease_state SET expires_at = '294276-12-25 00:00:00+00', lock_delay = '20 days'
 WHERE ns = 9 AND id = 9;
SELECT owner, expired, available_at FROM fenced_leases WHERE ns = 9 AND id = 9;
SELECT try_acquire_lease(9, 9, 'other', '1 minute') IS NULL AS busy;
-- A calendar delay within range adds as timestamptz + interval does; past the end, months
-- and days saturate too; an infinite expiry stays infinite.
UPDATE fenced_lease_state SET expires_at = '2030-01-31 12:00:00+00', lock_delay = '1 mon 1 day'
 WHERE ns = 9 AND id = 9;
SELECT available_at = expires_at + lock_delay AS calendar_sum,
       available_at AT TIME ZONE 'UTC' AS available_at_utc
  FROM fenced_leases WHERE ns = 9 AND id = 9;
UPDATE fenced_lease_state SET expires_at = '294276-12-25 00:00:00+00' WHERE ns = 9 AND id = 9;
UPDATE fenced_lease_state SET lock_delay = '100000 years' WHERE ns = 9 AND id = 9;
SELECT available_at FROM fenced_leases WHERE ns = 9 AND id = 9;
UPDATE fenced_lease_state SET expires_at = 'infinity' WHERE ns = 9 AND id = 9;
SELECT available_at FROM fenced_leases WHERE ns = 9 AND id = 9;
UPDATE fenced_lease_state SET expires_at = '294276-12-25 00:00:00+00', lock_delay = '20 days'
 WHERE ns = 9 AND id = 9;
-- A new backend's first first lease sweeps the table, that row among the rest.
\c
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT try_acquire_lease(9, 10, 'first', '1 minute') IS NOT NULL AS first_lease_of_another_key;
SELECT release_lease(9, 9, (SELECT token FROM fenced_lease_state WHERE ns = 9 AND id = 9))
       AS released_by_its_holder;

-- Item 4: what a DBA adds to the table that the direct writes would not honour is refused
-- (55000) when a call would write, and nothing is written: a column with a default or NOT
-- NULL that the lease functions do not know, a CHECK constraint, a stored generated column,
-- NOT NULL on the key's text, which a key given by numbers leaves NULL.
ALTER TABLE fenced_lease_state ADD COLUMN note text NOT NULL DEFAULT 'none';
SELECT try_acquire_lease(9, 20, 'o', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE fenced_lease_state DROP COLUMN note;
ALTER TABLE fenced_lease_state ADD COLUMN note text DEFAULT 'none';
SELECT try_acquire_lease(9, 20, 'o', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE fenced_lease_state DROP COLUMN note;
ALTER TABLE fenced_lease_state ADD CONSTRAINT short_owner CHECK (length(owner) < 5) NOT VALID;
SELECT try_acquire_lease(9, 20, 'a long owner', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT renew_lease(9, 10, (SELECT token FROM fenced_lease_state WHERE ns = 9 AND id = 10), '1 minute');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE fenced_lease_state DROP CONSTRAINT short_owner;
ALTER TABLE fenced_lease_state
    ADD COLUMN owner_length int GENERATED ALWAYS AS (length(owner)) STORED;
SELECT try_acquire_lease(9, 20, 'o', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE fenced_lease_state DROP COLUMN owner_length;
BEGIN;
UPDATE fenced_lease_state SET key = id::text WHERE key IS NULL;
ALTER TABLE fenced_lease_state ALTER COLUMN key SET NOT NULL;
SELECT try_acquire_lease(9, 20, 'o', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- NOT NULL on the owner is not refused: a release deletes its row (0.4.0), and no write leaves
-- an owner NULL.
BEGIN;
DELETE FROM fenced_lease_state WHERE owner IS NULL;
ALTER TABLE fenced_lease_state ALTER COLUMN owner SET NOT NULL;
SELECT release_lease(9, 10, (SELECT token FROM fenced_lease_state WHERE ns = 9 AND id = 10))
       AS released_with_owner_not_null;
SELECT count(*) AS row_deleted_by_the_release FROM fenced_lease_state WHERE ns = 9 AND id = 10;
ROLLBACK;
SELECT count(*) AS nothing_written FROM fenced_lease_state WHERE ns = 9 AND id = 20;
-- A nullable column without a default is stored NULL, as an INSERT would store it: allowed.
ALTER TABLE fenced_lease_state ADD COLUMN remark text;
SELECT try_acquire_lease(9, 20, 'o', '1 minute') IS NOT NULL AS taken;
SELECT remark IS NULL AS stored_null FROM fenced_lease_state WHERE ns = 9 AND id = 20;
ALTER TABLE fenced_lease_state DROP COLUMN remark;
SELECT count(*) FILTER (WHERE release_lease(ns, id, token)) AS released
  FROM fenced_lease_state WHERE ns = 9 AND owner IS NOT NULL;
DELETE FROM fenced_lease_state WHERE ns = 9;
