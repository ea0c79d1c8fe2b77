-- The lock alone on one hot key, no token.
BEGIN;
SELECT pg_advisory_xact_lock(1001, 1);
COMMIT;
