-- The same by hand (no fencing worth the name: the sequence is not durable per call, and the
-- wait is on one slot picked at random, not on the first freed): 4 advisory locks tried in
-- turn, the first free one taken; when all 4 are held, wait for a random one; then nextval.
BEGIN;
SELECT slot, nextval('bench_token_seq') AS token
  FROM (SELECT coalesce(
          (SELECT s FROM generate_series(1, 4) s
            WHERE pg_try_advisory_xact_lock(1001, 100 + s) LIMIT 1),
          (SELECT s FROM (SELECT 1 + floor(random() * 4)::int AS s) r
            WHERE pg_advisory_xact_lock(1001, 100 + r.s) IS NOT NULL)) AS slot) picked;
COMMIT;
