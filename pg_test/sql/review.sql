-- Defects found by the review of 0.2.0 (issue "Hardening 0.2.0"), one section each, numbered as
-- in the issue; every check here failed on 0.2.0. Items 3, 10 and 12 (concurrent sessions) are
-- isolation specs, items 4, 5, 8 and 11 (block reservations) fault tests, item 16 is in the
-- standby suite; items 6 and 7 are in enforce_fence, fenced_update and reinstall.
\set SHOW_CONTEXT never

-- 1. fenced_update's text id matches exactly the rows a literal of the key column's type
--    matches: never truncated to a varchar(n), never rounded to a numeric(p,s), read as a
--    domain's base type (unchecked, as a literal compares).
CREATE TABLE orders (id varchar(8) PRIMARY KEY, state text, fence bigint);
INSERT INTO orders VALUES ('ORD12345', 'new');
SELECT fenced_update_or_false('orders', 'ORD12345-EXTRA', 1, '{"state": "shipped"}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS literal_matches FROM orders WHERE id = 'ORD12345-EXTRA';
SELECT fenced_update_or_false('orders', 'ORD12345', 2, '{"state": "shipped"}') AS exact_id_written;
CREATE TABLE prices (id numeric(6,2) PRIMARY KEY, state text, fence bigint);
INSERT INTO prices VALUES (1.01, 'new');
SELECT fenced_update_or_false('prices', '1.005', 1, '{"state": "rounded"}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('prices', '1.01', 2, '{"state": "exact"}') AS exact_id_written,
       fenced_update_or_false('prices', '1.010', 3, '{"state": "equal"}') AS equal_numeric_written;
CREATE DOMAIN short_code AS varchar(4) CHECK (VALUE ~ '^[A-Z]+$');
CREATE TABLE codes (id short_code PRIMARY KEY, state text, fence bigint);
INSERT INTO codes VALUES ('ABCD', 'new');
SELECT fenced_update_or_false('codes', 'ABCDE', 1, '{"state": "truncated"}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('codes', 'abcd', 1, '{"state": "unchecked"}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('codes', 'ABCD', 2, '{"state": "exact"}') AS exact_id_written;
-- JDBC sends strings as varchar: read as the key column's type too.
SELECT fenced_update_or_false('prices', '1.01'::varchar, 4, '{"state": "varchar id"}') AS varchar_id;
SELECT * FROM orders;
SELECT * FROM prices;
SELECT * FROM codes;
DROP TABLE orders, prices, codes;
DROP DOMAIN short_code;

-- 2. Nothing locks, unlocks or draws a token during a parallel operation (a wrapper labelled
--    PARALLEL SAFE, run by a parallel worker): 25000, never a token without a lock.
-- PL/pgSQL, so that the planner cannot inline the body and see the unsafe call.
CREATE FUNCTION parallel_acquire(ns int, id int) RETURNS bigint LANGUAGE plpgsql PARALLEL SAFE
    AS 'BEGIN RETURN acquire_fenced(ns, id); END';
CREATE FUNCTION parallel_try_session(ns int, id int) RETURNS bigint LANGUAGE plpgsql
    PARALLEL SAFE AS 'BEGIN RETURN try_acquire_fenced_session(ns, id); END';
CREATE FUNCTION parallel_current(ns int, id int) RETURNS bigint LANGUAGE plpgsql PARALLEL SAFE
    AS 'BEGIN RETURN current_fence(ns, id); END';
CREATE FUNCTION parallel_release(ns int, id int) RETURNS boolean LANGUAGE plpgsql PARALLEL SAFE
    AS 'BEGIN RETURN release_fenced(ns, id); END';
CREATE FUNCTION parallel_lease(ns int, id int) RETURNS bigint LANGUAGE plpgsql PARALLEL SAFE
    AS 'BEGIN RETURN try_acquire_lease(ns, id, ''worker'', ''1 minute''); END';
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'on', false) AS parallel_forced;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SELECT acquire_fenced_session(7501, 2) > 0 AS session_grant_before;
BEGIN;
SELECT parallel_acquire(7501, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT parallel_acquire(7501, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT parallel_try_session(7501, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT parallel_current(7501, 2);
\echo :LAST_ERROR_SQLSTATE
SELECT parallel_release(7501, 2);
\echo :LAST_ERROR_SQLSTATE
SELECT parallel_lease(7501, 1);
\echo :LAST_ERROR_SQLSTATE
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'off', false) AS parallel_off;
-- Nothing was granted by the refused calls; the session grant is still held.
SELECT count(*) AS advisory_locks_on_7501_1 FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 7501 AND objid = 1;
SELECT count(*) AS leases_on_7501 FROM fenced_leases WHERE ns = 7501;
SELECT release_fenced(7501, 2) AS session_grant_released_after;
DROP FUNCTION parallel_acquire, parallel_try_session, parallel_current, parallel_release,
    parallel_lease;

-- 9. Owners and lease keys are identifiers of at most 256 bytes (22001, never truncated), and
--    released or long-expired leases are swept by later first leases: the lease table does not
--    grow without bound.
SELECT try_acquire_lease(7502, 1, repeat('o', 257), '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT register_namespace('review-leases') > 0 AS registered;
SELECT try_acquire_lease_named('review-leases', repeat('k', 257), 'owner', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced_session(7502, 1, owner => repeat('o', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_fenced_session(7502, 1, repeat('o', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_fenced_session(7502, 1, repeat('o', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT release_fenced(7502, 1, repeat('o', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_lease(7502, 1, repeat('o', 256), '1 minute') > 0 AS owner_of_256_bytes;
-- 200 leases: 100 released, 50 expired two hours ago, 50 live.
SELECT count(*) AS leased FROM (
    SELECT try_acquire_lease(7503, g, 'sweep', '1 hour') FROM generate_series(1, 200) g) l;
SELECT count(*) FILTER (WHERE release_lease(7503, id, token)) AS released
  FROM fenced_lease_state WHERE ns = 7503 AND id <= 100;
UPDATE fenced_lease_state SET expires_at = clock_timestamp() - interval '2 hours'
 WHERE ns = 7503 AND id BETWEEN 101 AND 150;
-- First leases of new keys sweep the table's pages (32 pages every 16th first lease of a
-- backend, up to every 256th after sweeps that found nothing) until none is left dead.
SELECT count(*) > 0 AS first_leases_taken FROM (
    SELECT try_acquire_lease(7504, g, 'sweeper', '1 minute')
      FROM generate_series(1, 256 * ((SELECT pg_relation_size('fenced_lease_state')
                                            / current_setting('block_size')::int)::int / 32 + 1)) g) l;
SELECT count(*) FILTER (WHERE owner IS NULL) AS released_left,
       count(*) FILTER (WHERE expires_at < clock_timestamp() - interval '1 hour')
           AS long_expired_left,
       count(*) FILTER (WHERE expires_at > clock_timestamp()) AS live_left
  FROM fenced_lease_state WHERE ns = 7503;
-- A key whose row was swept is leased again with a new, larger token.
SELECT max(token) AS before_sweep FROM fenced_lease_state \gset
SELECT try_acquire_lease(7503, 1, 'again', '1 minute') > :before_sweep AS new_larger_token;
DELETE FROM fenced_lease_state WHERE ns BETWEEN 7502 AND 7504;
DELETE FROM fenced_namespaces WHERE name = 'review-leases';

-- 14. A database that is not UTF8 is refused at CREATE EXTENSION (0A000), before any text
--     argument could be misread.
\set regress_database :DBNAME
CREATE DATABASE fenced_lock_latin1 ENCODING 'LATIN1' LOCALE 'C' TEMPLATE template0;
\c fenced_lock_latin1
CREATE EXTENSION fenced_lock;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'fenced_lock';
\c :regress_database
DROP DATABASE fenced_lock_latin1;

-- 15. fenced_update reports what kept a visible row with a lower fence from being written: a
--     BEFORE UPDATE trigger that skipped it is 09000 (not row-level security, not "superseded").
CREATE TABLE guarded (id int PRIMARY KEY, state text, fence bigint);
INSERT INTO guarded VALUES (1, 'new', 1);
CREATE FUNCTION skip_row() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
CREATE TRIGGER skip_every_update BEFORE UPDATE ON guarded FOR EACH ROW EXECUTE FUNCTION skip_row();
SELECT fenced_update_or_false('guarded', 1, 5, '{"state": "skipped"}');
\echo :LAST_ERROR_SQLSTATE
-- Still false for a stale token: the fence refuses it before any trigger could.
SELECT fenced_update_or_false('guarded', 1, 0, '{"state": "stale"}') AS stale_is_false;
SELECT * FROM guarded;
DROP TABLE guarded;
DROP FUNCTION skip_row;

-- Also checked: a session acquire with room for one more lock in the lock table. The sentinel
-- lock is taken before the key's, so the failure (53200) leaves the key unlocked; taken after,
-- the key stayed locked without a grant.
DO $$
BEGIN
    FOR i IN 1..1000000 LOOP
        PERFORM pg_advisory_lock(7801, i);
    END LOOP;
EXCEPTION WHEN out_of_memory THEN
    NULL;
END
$$;
SELECT pg_advisory_unlock(7801, 1) AS one_slot_free;
-- Terse: PostgreSQL 18 quotes the setting in its HINT.
\set VERBOSITY terse
SELECT acquire_fenced_session(7802, 1);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT count(*) AS key_left_locked FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 7802 AND pid = pg_backend_pid();
SELECT pg_advisory_unlock_all();
SELECT acquire_fenced_session(7802, 1) > 0 AS acquired_once_there_is_room,
       release_fenced(7802, 1) AS released;
SELECT count(*) AS locks_left FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();
