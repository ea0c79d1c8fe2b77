-- What a user would write without fenced_lock, in the style of Redis' SET key owner NX PX ttl
-- and a compare-and-delete: a row per held key, taken over when expired; no token.
\set id random(1, 1000000)
INSERT INTO bench_leases (id, owner, expires_at)
VALUES (:id, 'bench-' || :client_id, clock_timestamp() + interval '30 seconds')
ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
 WHERE bench_leases.expires_at <= clock_timestamp();
DELETE FROM bench_leases WHERE id = :id AND owner = 'bench-' || :client_id;
