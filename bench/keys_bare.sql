-- The same keys locked by hand: a bare advisory lock per key, in one statement, no token
-- (pgbench -D keys=N).
\set first random(1, 1000000)
\set last :first + :keys - 1
BEGIN;
SELECT count(pg_advisory_xact_lock(1001, g)) FROM generate_series(:first::int4, :last::int4) g;
COMMIT;
