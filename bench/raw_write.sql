\set id random(1, 100000)
BEGIN;
SELECT pg_advisory_xact_lock(1001, :id), nextval('bench_token_seq') AS token \gset
UPDATE bench_writes_raw SET fence = :token WHERE id = :id AND fence <= :token;
COMMIT;
