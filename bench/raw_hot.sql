-- One hot key, raw SQL: the advisory lock and a sequence value, not durable.
BEGIN;
SELECT pg_advisory_xact_lock(1001, 1), nextval('bench_token_seq');
COMMIT;
