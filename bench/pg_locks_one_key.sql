-- The same look in pg_locks: the advisory lock of the two-int4 key (2001, 42), no token.
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 2001 AND objid = 42 AND objsubid = 2;
