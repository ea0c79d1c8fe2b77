-- A table-backed lease: acquire with an owner and a TTL, release with the token (each its own
-- transaction, as through a pooler). A key another client holds gives 0: released as nothing.
\set id random(1, 1000000)
SELECT coalesce(try_acquire_lease(2001, :id, 'bench-' || :client_id, '30 seconds'), 0) AS token \gset
SELECT release_lease(2001, :id, :token);
