\set id random(1, 100000)
BEGIN;
SELECT acquire_fenced(1001, :id) AS token \gset
UPDATE bench_rows SET fence = :token WHERE id = :id AND fence <= :token;
COMMIT;
