\set id random(1, 100000)
BEGIN;
SELECT acquire_fenced(1001, :id);
COMMIT;
