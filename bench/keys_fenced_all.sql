-- :keys consecutive keys from a random first one, locked in one call with one token
-- (pgbench -D keys=N).
\set first random(1, 1000000)
\set last :first + :keys - 1
BEGIN;
SELECT acquire_fenced_all(1001, ARRAY(SELECT generate_series(:first::int4, :last::int4)));
COMMIT;
