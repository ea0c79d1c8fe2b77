COMMENT ON FUNCTION acquire_fenced(integer, integer) IS
    'Wait for the transaction-scoped advisory lock on (ns, id) (the lock of '
    'pg_advisory_xact_lock(ns, id)) and return a new fencing token, larger than every token '
    'granted before. Re-acquiring a key this transaction holds returns the same token.';

COMMENT ON FUNCTION acquire_fenced(integer, integer, interval) IS
    'Like acquire_fenced(ns, id), but wait at most timeout, then raise SQLSTATE 55P03 naming '
    'the key and its holders. A zero timeout tries once.';

COMMENT ON FUNCTION try_acquire_fenced(integer, integer) IS
    'Take the transaction-scoped advisory lock on (ns, id) without waiting: a new fencing token, '
    'or NULL when another session holds the key.';
