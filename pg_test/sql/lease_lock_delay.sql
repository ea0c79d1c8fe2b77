-- A lock-delay for leases (fenced_lock.lease_lock_delay): a lease that expires unreleased is
-- free for another owner only once its delay has passed too; a release frees it at once; the
-- holder renews it meanwhile; a waiting acquire sleeps until the delay's end; fenced_leases
-- shows the delay and when the key becomes available.
\set VERBOSITY terse
CREATE TEMP TABLE held (label text, token bigint, available_at timestamptz);

-- Taken with a 5 s delay and a 200 ms TTL (the 4.6 s after the sleep below are room for a
-- slow machine: the next owner must still be refused).
SET fenced_lock.lease_lock_delay = '5s';
INSERT INTO held SELECT 'a', try_acquire_lease(4400, 1, 'a', '200 ms'), NULL;
SELECT lock_delay, available_at = expires_at + interval '5 seconds' AS available_after_delay
  FROM fenced_leases WHERE ns = 4400 AND id = 1;
UPDATE held SET available_at = (SELECT available_at FROM fenced_leases WHERE ns = 4400 AND id = 1);
RESET fenced_lock.lease_lock_delay;
-- Expired, within the delay: another owner cannot take it.
SELECT pg_sleep(0.4);
SELECT expired FROM fenced_leases WHERE ns = 4400 AND id = 1;
SELECT try_acquire_lease(4400, 1, 'b', '10 s') IS NULL AS busy_within_delay;
-- The holder itself still renews it (with this session's delay now: none).
SELECT renew_lease(4400, 1, (SELECT token FROM held WHERE label = 'a'), '200 ms') IS NOT NULL
       AS holder_renews;
SELECT lock_delay FROM fenced_leases WHERE ns = 4400 AND id = 1;
-- Without a delay, once expired, the next owner takes it.
SELECT pg_sleep(0.4);
SELECT try_acquire_lease(4400, 1, 'b', '10 s') > (SELECT token FROM held WHERE label = 'a')
       AS taken_after_expiry;

-- A waiting acquire sleeps until the delay's end, not the expiry.
SET fenced_lock.lease_lock_delay = '800ms';
INSERT INTO held SELECT 'c', try_acquire_lease(4400, 2, 'c', '100 ms'), NULL;
UPDATE held SET available_at = (SELECT available_at FROM fenced_leases WHERE ns = 4400 AND id = 2)
 WHERE label = 'c';
RESET fenced_lock.lease_lock_delay;
SELECT acquire_lease(4400, 2, 'd', '10 s', '10 s') > (SELECT token FROM held WHERE label = 'c')
       AS waited,
       clock_timestamp() >= (SELECT available_at FROM held WHERE label = 'c') AS not_before_delay_end,
       clock_timestamp() < (SELECT available_at FROM held WHERE label = 'c') + interval '3 s'
           AS woken_soon_after;

-- A release frees the lease at once, whatever its delay.
SET fenced_lock.lease_lock_delay = '1h';
INSERT INTO held SELECT 'e', try_acquire_lease(4400, 3, 'e', '10 s'), NULL;
SELECT release_lease(4400, 3, (SELECT token FROM held WHERE label = 'e')) AS released;
SELECT try_acquire_lease(4400, 3, 'f', '10 s') IS NOT NULL AS taken_after_release;
RESET fenced_lock.lease_lock_delay;

-- The setting: milliseconds by default, never negative (22023).
SET fenced_lock.lease_lock_delay = 250;
SHOW fenced_lock.lease_lock_delay;
\set VERBOSITY sqlstate
SET fenced_lock.lease_lock_delay = '-1s';
\set VERBOSITY terse
RESET fenced_lock.lease_lock_delay;
SHOW fenced_lock.lease_lock_delay;
SELECT count(*) FROM fenced_leases WHERE ns = 4400 AND lock_delay <> '0' AND owner <> 'f';
DELETE FROM fenced_lease_state WHERE ns = 4400;
