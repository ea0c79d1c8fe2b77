-- An operator's look at one key in fenced_locks (who holds it, with which token).
SELECT count(*) FROM fenced_locks WHERE ns = 2001 AND id = 42;
