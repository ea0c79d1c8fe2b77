-- The sweep of released and long-expired lease rows backs off over pages of live leases (a
-- backend sweeps at its first first lease, then after 16 more, and doubles the interval after
-- each sweep that deletes nothing, up to 256), and still comes round to every retired row.
-- Each sweep is one sequential scan of the lease table (pg_stat_user_tables.seq_scan).
SET client_min_messages = warning;
-- 20,000 live leases of another owner: a few hundred pages, none of them retired.
INSERT INTO fenced_lease_state (ns, id, owner, holder, token, acquired_at, renewed_at,
                                expires_at, slot)
SELECT 9300, g, 'live', current_user::regrole, g, now(), now(), now() + interval '1 hour', 0
  FROM generate_series(1, 20000) g;
CREATE FUNCTION lease_table_scans() RETURNS bigint LANGUAGE sql AS $$
    SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'fenced_lease_state'
$$;
CREATE PROCEDURE first_leases(first int, last int) LANGUAGE plpgsql AS $$
BEGIN
    FOR id IN first .. last LOOP
        PERFORM try_acquire_lease(9301, id, 'sweeper', '1 hour');
        COMMIT;
        EXIT WHEN id > 256 AND NOT EXISTS (SELECT FROM fenced_lease_state WHERE ns = 9302);
    END LOOP;
END
$$;
-- A new backend, whose first first lease sweeps.
\c
SET client_min_messages = warning;
SELECT pg_stat_force_next_flush();
SELECT lease_table_scans() AS scans_before \gset
-- 256 first leases, each its own transaction: without the back-off, 16 sweeps; with it, at
-- the 1st, 33rd, 97th and 225th.
CALL first_leases(1, 256);
SELECT count(*) AS held FROM fenced_leases WHERE ns = 9301;
SELECT pg_stat_force_next_flush();
SELECT lease_table_scans() - :scans_before AS sweeps;

-- Retired rows behind the live ones: the backed-off sweeper still reaches them all. A release
-- deletes its own row (0.4.0); the sweep takes the rows of leases long expired, and those
-- releases before 0.4.0 left (owner NULL) in an upgraded database.
SELECT count(release_lease(9302, g, try_acquire_lease(9302, g, 'gone', '1 minute')))
  FROM generate_series(1, 100) g;
SELECT count(*) AS released_rows_deleted_by_the_release
  FROM generate_series(1, 100) g
 WHERE NOT EXISTS (SELECT FROM fenced_lease_state WHERE ns = 9302 AND id = g);
SELECT count(try_acquire_lease(9302, g, 'gone', '1 minute')) FROM generate_series(1, 100) g;
UPDATE fenced_lease_state SET owner = NULL, holder = NULL, renewed_at = NULL, expires_at = NULL
 WHERE ns = 9302 AND id <= 50;
UPDATE fenced_lease_state SET expires_at = clock_timestamp() - interval '2 hours'
 WHERE ns = 9302 AND id > 50;
-- (At most 20,000 more first leases: at least 78 sweeps of 32 pages, several passes over the
-- table however it grew; the loop stops once they are gone.)
CALL first_leases(257, 20256);
SELECT count(*) AS retired_rows_left FROM fenced_lease_state WHERE ns = 9302;

DELETE FROM fenced_lease_state WHERE ns IN (9300, 9301, 9302);
DROP FUNCTION lease_table_scans();
DROP PROCEDURE first_leases(int, int);
