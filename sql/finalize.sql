-- Objects built on the functions above, then a comment on every function.

-- One row per two-int4 advisory lock in this database, held or awaited, with its fenced grant
-- (token, scope, since) when fenced_lock is preloaded, its namespace's name, the key's text
-- when acquired by name, and the session. fenced_lock_rows() joins the lock table and the
-- grants table itself (by hashing), so a read costs the same whatever the query filters on;
-- its row estimate steers the two small joins here to hashing too.
CREATE VIEW fenced_locks AS
SELECT r.ns,
       n.name AS namespace,
       r.key,
       r.id,
       r.pid,
       r.granted,
       r.token,
       r.scope,
       r.owner,
       r.acquired_at,
       r.wait_started,
       CASE WHEN NOT r.granted THEN pg_catalog.clock_timestamp() - r.wait_started END AS waiting,
       CASE WHEN NOT r.granted THEN pg_catalog.pg_blocking_pids(r.pid) END AS blocked_by,
       a.application_name,
       a.usename,
       a.client_addr,
       a.state,
       a.xact_start,
       a.state_change,
       a.query,
       r.mode,
       r.slot
  FROM fenced_lock_internal.fenced_lock_rows() r
  LEFT JOIN @extschema@.fenced_namespaces n ON n.ns = r.ns
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = r.pid;

-- Readable by every role, like pg_locks (pg_stat_activity hides other users' queries itself).
GRANT SELECT ON fenced_locks TO PUBLIC;

COMMENT ON VIEW fenced_locks IS
    'fenced_lock: every two-int4 advisory lock of this database, held or awaited, and every '
    'permit of a fenced semaphore: key (signed), namespace name, the key''s text when acquired '
    'by name, holder or waiter, token/scope/owner/acquired_at (when preloaded), wait time, '
    'blockers, the session, the mode (exclusive, shared, permit) and a permit''s slot.';

-- The leases that are held (or expired but not taken over), with their namespace's name.
CREATE VIEW fenced_leases AS
SELECT l.ns,
       n.name AS namespace,
       l.key,
       l.id,
       l.owner,
       l.holder AS role,
       l.token,
       l.acquired_at,
       l.renewed_at,
       l.expires_at,
       l.expires_at <= pg_catalog.clock_timestamp() AS expired,
       l.lock_delay,
       fenced_lock_internal.fenced_lease_available_at(l.expires_at, l.lock_delay) AS available_at,
       l.slot
  FROM @extschema@.fenced_lease_state l
  LEFT JOIN @extschema@.fenced_namespaces n ON n.ns = l.ns
 WHERE l.owner IS NOT NULL;

GRANT SELECT ON fenced_leases TO PUBLIC;

COMMENT ON FUNCTION fenced_lock_internal.fenced_lease_available_at(timestamptz, interval) IS
    'fenced_lock: when a lease that expires unreleased at expires_at, with lock_delay, is '
    'available to another owner: their sum, ''infinity'' past the end of time (fenced_leases).';

COMMENT ON VIEW fenced_leases IS
    'fenced_lock: every lease held, or expired and not yet taken over: key, owner, the role that '
    'acquired it, token, acquired/renewed/expires at (the database''s clock), expired, its '
    'lock_delay and available_at, when another owner can take it if it is not released, and '
    'the slot of a permit of a lease semaphore (0 for a lease).';

COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_grants() IS
    'The live fenced grants of this database (pid, ns, id, token, scope, acquired_at, key: the '
    'text of a named key, owner: the owner of a session grant; each their first 64 bytes) from '
    'the shared grants table; empty unless fenced_lock is in shared_preload_libraries.';

ALTER FUNCTION fenced_lock_internal.fenced_lock_rows() ROWS 10000;

COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_rows() IS
    'The rows of fenced_locks without the session''s columns: every two-int4 advisory lock of '
    'this database and every permit, held or awaited, with its fenced grant, mode and slot; one '
    'pass over the lock table and the grants table.';

COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_grants_available() IS
    'Whether this server keeps the shared grants table (fenced_lock is preloaded).';

-- The functions behind the views: a view's reader needs EXECUTE on them, so they cannot be
-- revoked from PUBLIC; they live in a schema of their own, out of the one users call.
GRANT USAGE ON SCHEMA fenced_lock_internal TO PUBLIC;

COMMENT ON SCHEMA fenced_lock_internal IS
    'fenced_lock: the functions behind its views (not its API; docs/api.md).';

COMMENT ON FUNCTION acquire_fenced(integer, integer, interval, boolean) IS
    'Wait for the transaction-scoped advisory lock on (ns, id) (pg_advisory_xact_lock''s; with '
    'shared, pg_advisory_xact_lock_shared''s) and return a new fencing token, larger than every '
    'token granted before; at most timeout (NULL: no limit), then SQLSTATE 55P03 naming the key '
    'and its holders. The key held by this transaction: the same token.';

COMMENT ON FUNCTION try_acquire_fenced(integer, integer, boolean) IS
    'Take the transaction-scoped advisory lock on (ns, id) without waiting: a new fencing token, '
    'or NULL when the key is busy.';

COMMENT ON FUNCTION acquire_fenced_all(integer, integer[], interval) IS
    'Wait for the transaction-scoped advisory locks on (ns, id) for every id (each once), taken '
    'in ascending order so that overlapping sets never deadlock, and return one new fencing '
    'token for all of them; the whole call waits at most timeout (NULL: no limit), then 55P03.';

COMMENT ON FUNCTION try_acquire_fenced_all(integer, integer[]) IS
    'Take the transaction-scoped advisory locks on (ns, id) for every id without waiting, all '
    'or none: one new fencing token, or NULL (nothing taken) when any is busy.';

COMMENT ON FUNCTION acquire_fenced_all_named(text, text[], interval) IS
    'acquire_fenced_all for named keys of a registered namespace: one token for all of them.';

COMMENT ON FUNCTION try_acquire_fenced_all_named(text, text[]) IS
    'try_acquire_fenced_all for named keys of a registered namespace: all or none.';

COMMENT ON FUNCTION acquire_fenced_session(integer, integer, interval, text, boolean) IS
    'Wait for the session-level advisory lock on (ns, id) (pg_advisory_lock''s; with shared, '
    'pg_advisory_lock_shared''s) for owner (NULL: none) and return a new fencing token; held '
    'until release_fenced or the session ends. At most timeout (NULL: no limit), then 55P03. '
    'Held by this session for the same owner: the same token; for another (or none): 55000.';

COMMENT ON FUNCTION try_acquire_fenced_session(integer, integer, text, boolean) IS
    'Take the session-level advisory lock on (ns, id) for owner without waiting, as a leader '
    'does: a new fencing token (the term), the same one when this session holds it for owner, '
    'or NULL when another session holds it (or this one for another owner, or none).';

COMMENT ON FUNCTION release_fenced(integer, integer, text) IS
    'Release this session''s session-scoped fenced lock on (ns, id) taken for owner (NULL: '
    'none) and NOTIFY fenced_lock, ''ns:id''. False, with a WARNING, when not held so.';

COMMENT ON FUNCTION release_all_fenced(text) IS
    'Release every session-scoped fenced lock of this session taken for owner (NULL: without '
    'one), with a NOTIFY each; how many.';

COMMENT ON FUNCTION current_fence(integer, integer, text) IS
    'The token of the fenced lock this session holds on (ns, id) at transaction scope, or at '
    'session scope taken for owner (NULL: without one); else NULL.';

COMMENT ON FUNCTION acquire_permit(integer, integer, integer, interval) IS
    'Wait, in arrival order, for one of the permits slots of the fenced semaphore (ns, id) for '
    'this transaction: one row (slot, token), the token new and larger than every token granted '
    'before; at most timeout (NULL: no limit), then 55P03. Asked again: the same row.';

COMMENT ON FUNCTION try_acquire_permit(integer, integer, integer) IS
    'Take a permit of (ns, id) for this transaction without waiting: one row (slot, token), or '
    'no row when none is free or others wait in line.';

COMMENT ON FUNCTION acquire_permit_session(integer, integer, integer, interval, text) IS
    'acquire_permit for this session, for owner (NULL: none): held until release_permit or the '
    'session ends; only that owner gets it back or releases it.';

COMMENT ON FUNCTION try_acquire_permit_session(integer, integer, integer, text) IS
    'try_acquire_permit for this session, for owner: one row (slot, token), or none.';

COMMENT ON FUNCTION release_permit(integer, integer, integer, text) IS
    'Release this session''s permit slot of (ns, id) taken for owner (NULL: none): true, or '
    'false with a WARNING when not held so. Wakes the key''s line.';

COMMENT ON FUNCTION acquire_lease(integer, integer, text, interval, interval) IS
    'The lease on (ns, id) for owner, for ttl on the database''s clock: a new token (larger than '
    'every earlier one) once the key is free or expired, the same token with the TTL extended '
    'when owner holds it; waits in arrival order at most timeout (NULL: no limit), then 55P03. '
    'Leases are not advisory locks.';

COMMENT ON FUNCTION try_acquire_lease(integer, integer, text, interval) IS
    'acquire_lease without waiting: the token, or NULL when another owner holds the key.';

COMMENT ON FUNCTION acquire_lease_permit(integer, integer, integer, text, interval, interval) IS
    'A permit of the lease semaphore (ns, id) of permits slots for owner, for ttl: one row (slot, '
    'token), the same row with the TTL extended when owner holds one; waits as acquire_lease '
    'does. Renewed and released by token (renew_lease, release_lease).';

COMMENT ON FUNCTION try_acquire_lease_permit(integer, integer, integer, text, interval) IS
    'acquire_lease_permit without waiting: one row (slot, token), or no row when none is free.';

COMMENT ON FUNCTION renew_lease(integer, integer, bigint, interval) IS
    'Extend the lease held with token to ttl from now: the new expiry, or NULL when the lease is '
    'lost (taken over after expiry, released, never held with token, or by another role).';

COMMENT ON FUNCTION release_lease(integer, integer, bigint) IS
    'Release the lease held with token and wake waiting acquires: true, or false when no lease '
    'is held with token by this role.';

COMMENT ON FUNCTION fenced_update(regclass, anyelement, bigint, jsonb, text, text) IS
    'Conditional write for a fenced holder: UPDATE target SET <changes>, <fence_column> = token '
    'WHERE <key_column> = id AND <fence_column> <= token; SQLSTATE SF001 when the row carries a '
    'higher token (the caller was superseded); P0002 when there is no such row.';

COMMENT ON FUNCTION fenced_update(regclass, text, bigint, jsonb, text, text) IS
    'fenced_update with a text id, read as the key column''s type: what an untyped driver '
    'parameter resolves to, so int, bigint, uuid and text keys need no cast.';

COMMENT ON FUNCTION fenced_update(text, anyelement, bigint, jsonb, text, text) IS
    'fenced_update with the table given by name (looked up through search_path): what an '
    'untyped driver parameter resolves to.';

COMMENT ON FUNCTION fenced_update(text, text, bigint, jsonb, text, text) IS
    'fenced_update with the table given by name and a text id: every parameter untyped, as '
    'asyncpg, node-postgres and tokio-postgres send them.';

COMMENT ON FUNCTION fenced_update_or_false(regclass, anyelement, bigint, jsonb, text, text) IS
    'fenced_update that returns false when the row carries a higher token instead of raising '
    'SF001, true when written: for SQL that branches on it.';

COMMENT ON FUNCTION fenced_update_or_false(regclass, text, bigint, jsonb, text, text) IS
    'fenced_update_or_false with a text id, read as the key column''s type.';

COMMENT ON FUNCTION fenced_update_or_false(text, anyelement, bigint, jsonb, text, text) IS
    'fenced_update_or_false with the table given by name (looked up through search_path).';

COMMENT ON FUNCTION fenced_update_or_false(text, text, bigint, jsonb, text, text) IS
    'fenced_update_or_false with the table given by name and a text id: every parameter untyped.';

COMMENT ON FUNCTION new_fencing_token() IS
    'A fencing token from the same allocator as every grant''s, without taking any lock: only '
    'safe under a lock that already orders the holders (a row claimed FOR UPDATE SKIP LOCKED).';

COMMENT ON FUNCTION enforce_fence() IS
    'Trigger function: BEFORE UPDATE ... FOR EACH ROW EXECUTE FUNCTION enforce_fence(''fence'') '
    'refuses, with SQLSTATE SF001, any UPDATE that lowers the fence column or sets it to NULL.';

COMMENT ON FUNCTION fence_check(text, bigint) IS
    'Fence ledger for resources outside the database: record token for resource when it is at '
    'least the highest token accepted so far (or the resource is new), else SQLSTATE SF001.';

COMMENT ON FUNCTION fence_check_or_false(text, bigint) IS
    'fence_check that returns false for a stale token instead of raising SF001, true when '
    'recorded.';

COMMENT ON FUNCTION fenced_key(text) IS
    'The int4 a text key stands for in a fenced lock key: 32-bit FNV-1a of its UTF-8 bytes, read '
    'as a signed int4. Stable across platforms and versions; a collision only makes two keys '
    'contend, it never lets two holders in.';

COMMENT ON FUNCTION register_namespace(text, integer, text) IS
    'Register a namespace name for the first int4 of fenced lock keys and return its id (the '
    'lowest free positive id when ns is NULL). Same name and id again: no-op. A name or id taken '
    'by another entry: SQLSTATE 23505.';

COMMENT ON FUNCTION force_release(integer, integer) IS
    'Terminate the other backends holding (ns, id), the only way to free another session''s '
    'lock, and return how many. Needs the rights of pg_terminate_backend. The next holder gets '
    'a larger token, so the terminated holder''s late writes are refused at fenced resources.';

-- Every key-taking function F(ns, id, ...) has a named form under a name of its own (an
-- untyped driver call must never pick another key): F_named(namespace text, key text, ...),
-- for the key (registered id of namespace, fenced_key(key)). Their comments say so.
-- (acquire_fenced_all_named and its try form take many keys: their comments are above.)
DO $comment_named_forms$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.oid::pg_catalog.regprocedure AS signature,
               pg_catalog.regexp_replace(p.proname, '_named$', '') || '('
                   || pg_catalog.array_to_string(ARRAY['ns', 'id'] || p.proargnames[3:], ', ')
                   || ')' AS pair_form
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d
            ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
           AND d.deptype = 'e'
          JOIN pg_catalog.pg_extension e
            ON d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid = e.oid AND e.extname = 'fenced_lock'
         WHERE p.proname ~ '_named$'
           -- Not the key-set forms (keys text[]): their comments are their own.
           AND p.proargtypes[1] <> 'pg_catalog.text[]'::pg_catalog.regtype
    LOOP
        EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', f.signature,
            pg_catalog.format('%s for the key (registered id of namespace, fenced_key(key)).',
                              f.pair_form));
    END LOOP;
END
$comment_named_forms$;

-- Cumulative counters (when preloaded), since stats_reset: one row per database and
-- namespace counted, one per database (namespace NULL) for tokens drawn for no key, failover
-- skips and advances, and one "other" row (database NULL) for namespaces counted after
-- fenced_lock.stats_max_namespaces rows. Every role sees its own database's rows; roles with
-- pg_read_all_stats, and the extension's owner, see every database's.
-- The counter columns come from the one list of them (src/stats/mod.rs, counters!).
DO $fenced_lock_stats$
BEGIN
    EXECUTE pg_catalog.format($view$
CREATE VIEW @extschema@.fenced_lock_stats AS
SELECT s.dbid,
       d.datname AS database,
       s.ns,
       n.name AS namespace,
       %s,
       s.stats_reset
  FROM fenced_lock_internal.fenced_lock_stats_rows() s
  LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dbid
  -- Namespace names are this database's: other databases' rows show only the number.
  LEFT JOIN @extschema@.fenced_namespaces n
    ON n.ns = s.ns
   AND s.dbid = (SELECT oid FROM pg_catalog.pg_database
                  WHERE datname = pg_catalog.current_database())$view$,
        fenced_lock_internal.fenced_lock_columns('fenced_lock_stats'));
END
$fenced_lock_stats$;

GRANT SELECT ON fenced_lock_stats TO PUBLIC;

COMMENT ON VIEW fenced_lock_stats IS
    'fenced_lock: cumulative counters per database and namespace since stats_reset (needs '
    'preloading): acquisitions at once and after a wait, wait time (ms), busy tries, timeouts, '
    'deadlocks, tokens, session grants, leader terms (exclusive session grants), leases, force '
    'releases, failover skips and token advances.';

-- Tokens checked where data lives (when preloaded), since stats_reset: one row per database,
-- table and check (the ledger's checks count at fence_ledger), and one "other" row (database
-- NULL) for tables counted after fenced_lock.stats_max_tables rows. Visible as fenced_lock_stats
-- is.
DO $fenced_lock_refusals$
BEGIN
    EXECUTE pg_catalog.format($view$
CREATE VIEW @extschema@.fenced_lock_refusals AS
SELECT s.dbid,
       d.datname AS database,
       s.relid,
       c.oid::pg_catalog.regclass AS relation,
       s.check_name AS checked_by,
       %s,
       s.stats_reset
  FROM fenced_lock_internal.fenced_lock_refusal_rows() s
  LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dbid
  -- Table names are this database's: other databases' rows show only the OID.
  LEFT JOIN pg_catalog.pg_class c
    ON c.oid = s.relid
   AND s.dbid = (SELECT oid FROM pg_catalog.pg_database
                  WHERE datname = pg_catalog.current_database())$view$,
        fenced_lock_internal.fenced_lock_columns('fenced_lock_refusals'));
END
$fenced_lock_refusals$;

GRANT SELECT ON fenced_lock_refusals TO PUBLIC;

COMMENT ON VIEW fenced_lock_refusals IS
    'fenced_lock: fencing tokens checked per table and check since stats_reset (needs '
    'preloading): stale tokens refused, the last one and when; tokens accepted, the last, the '
    'highest, and when.';

COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_columns(text) IS
    'fenced_lock: the counter columns of fenced_lock_stats or fenced_lock_refusals, as the '
    'view''s select list: the scripts build the views from it.';
-- Only the scripts need it.
REVOKE EXECUTE ON FUNCTION fenced_lock_internal.fenced_lock_columns(text) FROM PUBLIC;
COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_stats_rows() IS
    'fenced_lock: the rows of fenced_lock_stats (counters in the view''s order).';
COMMENT ON FUNCTION fenced_lock_internal.fenced_lock_refusal_rows() IS
    'fenced_lock: the rows of fenced_lock_refusals (counters in the view''s order).';
COMMENT ON FUNCTION fenced_lock_stats_reset() IS
    'fenced_lock: zero the counters of fenced_lock_stats and fenced_lock_refusals, in every '
    'database; returns when. Only for the extension''s owner, who may grant it.';
-- Zeroing every database's counters is the owner's decision (as pg_stat_statements_reset is).
REVOKE EXECUTE ON FUNCTION fenced_lock_stats_reset() FROM PUBLIC;

-- The ledger's rows are shared by every role: only roles the owner allows may advance them
-- (GRANT EXECUTE ON FUNCTION fence_check(text, bigint), fence_check_or_false(text, bigint)
-- TO app_role), or any role could store a huge token and lock every honest holder out.
REVOKE EXECUTE ON FUNCTION fence_check(text, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fence_check_or_false(text, bigint) FROM PUBLIC;

COMMENT ON FUNCTION advance_fencing_tokens(bigint) IS
    'Move the token sequence forward so that every token issued after this returns is larger '
    'than past (never back): for a resource that accepted tokens this server never issued. '
    'Returns the sequence''s position. Only for the extension''s owner.';
-- Moving every token forward is the owner's decision: any other role could exhaust the sequence.
REVOKE EXECUTE ON FUNCTION advance_fencing_tokens(bigint) FROM PUBLIC;
