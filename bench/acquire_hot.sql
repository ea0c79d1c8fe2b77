BEGIN;
SELECT acquire_fenced(1001, 1);
COMMIT;
