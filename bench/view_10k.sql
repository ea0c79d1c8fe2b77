SELECT count(*) FROM fenced_locks;
