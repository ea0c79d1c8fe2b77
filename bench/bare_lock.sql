-- The lock alone, no token: what acquire_fenced takes, as PostgreSQL's own function.
\set id random(1, 100000)
BEGIN;
SELECT pg_advisory_xact_lock(1001, :id);
COMMIT;
