-- fenced_lock_stats and fenced_lock_refusals: what each call counts, when counts show (at the
-- end of the counting transaction), fenced_lock.track, the reset and who sees what.
\set SHOW_CONTEXT never
SELECT fenced_lock_stats_reset() >= now() AS reset;
-- This database's rows (the counters are the server's: other databases count too).
CREATE VIEW own_stats AS
SELECT * FROM fenced_lock_stats
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
CREATE FUNCTION ns_stats(namespace_id int4) RETURNS TABLE (counter text, value numeric)
LANGUAGE sql AS $$
    SELECT key, value::numeric
      FROM own_stats s, jsonb_each_text(to_jsonb(s) - 'dbid' - 'database' - 'ns'
                                                 - 'namespace' - 'stats_reset'
                                                 - 'last_failover_skip_at'
                                                 - 'last_token_advance_at'
                                                 - 'wait_time' - 'max_wait_time')
     WHERE s.ns IS NOT DISTINCT FROM namespace_id AND value::numeric <> 0
     ORDER BY key
$$;
-- Every counter starts at zero after the reset.
SELECT bool_and(acquired_immediately + tokens_issued + leases_acquired + busy = 0) AS all_zero,
       bool_and(stats_reset >= now() - interval '1 minute') AS reset_recorded
  FROM fenced_lock_stats;

-- A transaction lock: counted when the transaction ends, not before.
BEGIN;
SELECT acquire_fenced(4201, 1) > 0 AS granted;
SELECT acquire_fenced(4201, 1) > 0 AS held_again_not_counted;
SELECT count(*) AS counted_inside FROM ns_stats(4201);
COMMIT;
SELECT * FROM ns_stats(4201);

-- An aborted transaction's counts count too, as PostgreSQL's statistics do.
BEGIN;
SELECT acquire_fenced_all(4201, ARRAY[2, 3, 4]) > 0 AS all_granted;
ROLLBACK;
SELECT * FROM ns_stats(4201);

-- Session grants, leader terms (a term held again is no new term), their tokens.
SELECT acquire_fenced_session(4202, 1) > 0 AS session_grant;
SELECT try_acquire_fenced_session(4202, 2, 'me') AS term \gset
SELECT try_acquire_fenced_session(4202, 2, 'me') = :term AS same_term;
SELECT release_all_fenced() AS released;
SELECT * FROM ns_stats(4202);

-- Leases: acquired, renewed (by acquire and by renew_lease), released, taken over after
-- expiry, and refused during a lock-delay (counted once per call).
SELECT try_acquire_lease(4203, 1, 'w1', '1 hour') AS t1 \gset
SELECT try_acquire_lease(4203, 1, 'w1', '1 hour') = :t1 AS renewed_by_acquire;
SELECT renew_lease(4203, 1, :t1, '1 hour') IS NOT NULL AS renewed;
SELECT release_lease(4203, 1, :t1) AS released;
SELECT try_acquire_lease(4203, 2, 'w1', '10 ms') > 0 AS short_lease;
SELECT pg_sleep(0.05);
SELECT try_acquire_lease(4203, 2, 'w2', '1 hour') > 0 AS taken_over;
SET fenced_lock.lease_lock_delay = '1h';
SELECT try_acquire_lease(4203, 3, 'w1', '10 ms') > 0 AS delayed_lease;
SELECT pg_sleep(0.05);
SELECT try_acquire_lease(4203, 3, 'w2', '1 hour') AS refused_by_delay;
SELECT acquire_lease(4203, 3, 'w2', '1 hour', '30 ms') AS refused_after_waiting;
\echo :LAST_ERROR_SQLSTATE
RESET fenced_lock.lease_lock_delay;
SELECT * FROM ns_stats(4203);

-- Tokens for no key, and advances, in the database's own row (namespace NULL).
SELECT new_fencing_token() > 0 AS token;
SELECT advance_fencing_tokens(1) > 0 AS advanced;
SELECT * FROM ns_stats(NULL);
SELECT last_token_advance_at >= now() - interval '1 minute' AS advance_time,
       last_failover_skip_at IS NULL AS no_skip
  FROM own_stats WHERE ns IS NULL;

-- Names where the namespace is registered.
SELECT register_namespace('stats_names', 4204) AS registered;
BEGIN;
SELECT acquire_fenced_named('stats_names', 'k') > 0 AS granted;
COMMIT;
SELECT namespace, acquired_immediately FROM own_stats WHERE ns = 4204;

-- fenced_lock.track = off counts nothing; superuser-only.
SET fenced_lock.track = off;
BEGIN;
SELECT acquire_fenced(4205, 1) > 0 AS granted;
COMMIT;
RESET fenced_lock.track;
SELECT count(*) AS untracked_rows FROM own_stats WHERE ns = 4205;

-- Refusals and acceptances per table and check; the ledger counts at fence_ledger.
CREATE TABLE stats_jobs (id int PRIMARY KEY, fence bigint, v text);
INSERT INTO stats_jobs VALUES (1, NULL, 'a'), (2, NULL, 'a');
SELECT fenced_update_or_false('stats_jobs', 1, 100, '{"v": "b"}') AS written;
SELECT fenced_update_or_false('stats_jobs', 1, 99, '{"v": "c"}') AS stale;
SELECT fenced_update_or_false('stats_jobs', 1, 98, '{"v": "c"}') AS stale_again;
SELECT fenced_update('stats_jobs', 1, 97, '{"v": "c"}');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE stats_guarded (id int PRIMARY KEY, fence bigint);
CREATE TRIGGER stats_guarded_fence BEFORE UPDATE ON stats_guarded
    FOR EACH ROW EXECUTE FUNCTION enforce_fence();
INSERT INTO stats_guarded VALUES (1, 5);
UPDATE stats_guarded SET fence = 7;
UPDATE stats_guarded SET fence = 6;
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check_or_false('stats://r', 10) AS accepted, fence_check_or_false('stats://r', 9) AS refused;
SELECT fence_check('stats://r', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT relation, checked_by, refused, last_refused_token, accepted, last_accepted_token,
       highest_accepted_token,
       last_refused_at IS NOT DISTINCT FROM CASE WHEN refused > 0 THEN last_refused_at END
           AND (last_refused_at IS NULL OR last_refused_at >= now() - interval '1 minute')
           AS refused_at,
       (last_accepted_at IS NULL) = (accepted = 0) AS accepted_at
  FROM fenced_lock_refusals
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   -- This test's tables (those of tests before it keep their rows).
   AND relation::text IN ('fence_ledger', 'stats_guarded', 'stats_jobs')
 ORDER BY relation::text, checked_by;

-- Who sees what: every role its own database's rows; "other" (database NULL) and other
-- databases' rows only with pg_read_all_stats or as the extension's owner. Only the owner
-- resets, unless granted.
CREATE ROLE stats_reader;
CREATE ROLE stats_monitor IN ROLE pg_read_all_stats;
SET ROLE stats_reader;
SELECT count(*) FILTER (WHERE dbid IS NULL) AS other_rows,
       count(*) FILTER (WHERE database <> current_database()) AS other_databases,
       count(*) FILTER (WHERE ns = 4201 AND database = current_database()) AS own_rows
  FROM fenced_lock_stats;
SELECT count(*) FILTER (WHERE dbid IS NULL) AS other_rows FROM fenced_lock_refusals;
SELECT fenced_lock_stats_reset();
\echo :LAST_ERROR_SQLSTATE
SET ROLE stats_monitor;
SELECT count(*) FILTER (WHERE dbid IS NULL) AS other_rows FROM fenced_lock_stats;
RESET ROLE;
GRANT EXECUTE ON FUNCTION fenced_lock_stats_reset() TO stats_reader;
SET ROLE stats_reader;
SELECT fenced_lock_stats_reset() IS NOT NULL AS granted_reset;
RESET ROLE;
SELECT coalesce(sum(acquired_immediately), 0) AS after_reset FROM fenced_lock_stats;
SELECT coalesce(sum(refused + accepted), 0) AS after_reset FROM fenced_lock_refusals;

-- The refusal log: one LOG line per table and check and second (shown here through
-- client_min_messages); the next says how many it stands for.
CREATE TABLE stats_log (id int PRIMARY KEY, fence bigint);
INSERT INTO stats_log VALUES (1, 50);
SET client_min_messages = log;
SELECT fenced_update_or_false('stats_log', 1, 40) AS logged;
SELECT fenced_update_or_false('stats_log', 1, 41) AS not_logged;
SELECT fenced_update_or_false('stats_log', 1, 42) AS not_logged;
SELECT pg_sleep(1.1);
SELECT fenced_update_or_false('stats_log', 1, 43) AS logged_with_count;
SET fenced_lock.log_refusals = off;
SELECT pg_sleep(1.1);
SELECT fenced_update_or_false('stats_log', 1, 44) AS not_logged_when_off;
RESET fenced_lock.log_refusals;
RESET client_min_messages;

-- Reading the counters assigns no transaction ID (fourth review of 0.4.0, item 7: its
-- visibility check ran a query that marked the transaction as writing, which failed on a hot
-- standby and in parallel plans), and works in a forced parallel plan.
BEGIN;
SELECT count(*) >= 0 AS read FROM fenced_lock_stats;
SELECT count(*) >= 0 AS read FROM fenced_lock_refusals;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_transaction_id;
COMMIT;
BEGIN;
SELECT set_config(name, 'on', true) AS forced_parallel FROM pg_settings
 WHERE name IN ('force_parallel_mode', 'debug_parallel_query');
SELECT count(*) >= 0 AS read_in_parallel_plan FROM fenced_lock_stats;
SELECT count(*) >= 0 AS read_in_parallel_plan FROM fenced_lock_refusals;
COMMIT;

-- Another database's rows stay hidden from a role that redefines = (name, name) in its own
-- schema ahead of pg_catalog and owns an extension of its own (item 8: the visibility check's
-- query took that operator, and the role read every database's counters).
SELECT current_database() AS regress_database \gset
CREATE DATABASE fenced_lock_stats_elsewhere;
\c fenced_lock_stats_elsewhere
SET client_min_messages = warning;
CREATE EXTENSION fenced_lock;
BEGIN;
SELECT acquire_fenced(4205, 1) > 0 AS counted_elsewhere;
COMMIT;
\c :regress_database
-- The extension: one the major ships (pg_trgm, or pgvector in the PostgreSQL 16 used here),
-- given to the role as CREATE EXTENSION of a trusted one would.
SELECT min(name) AS own_extension FROM pg_available_extensions
 WHERE name IN ('pg_trgm', 'vector') \gset
CREATE ROLE stats_snoop;
CREATE SCHEMA snoop AUTHORIZATION stats_snoop;
CREATE EXTENSION :"own_extension" SCHEMA snoop;
UPDATE pg_extension SET extowner = 'stats_snoop'::regrole WHERE extname = :'own_extension';
SET ROLE stats_snoop;
SELECT format('CREATE FUNCTION snoop.name_eq(name, name) RETURNS boolean LANGUAGE sql IMMUTABLE
                   AS $f$ SELECT $1::text OPERATOR(pg_catalog.=) %L $f$', :'own_extension')
    AS snoop_function \gset
:snoop_function;
CREATE OPERATOR snoop.= (LEFTARG = name, RIGHTARG = name, FUNCTION = snoop.name_eq);
SET search_path = snoop, pg_catalog, public;
SELECT count(*) FILTER (WHERE database OPERATOR(pg_catalog.<>) current_database()) AS other_databases
  FROM public.fenced_lock_stats;
RESET search_path;
RESET ROLE;
DROP EXTENSION :"own_extension";
DROP SCHEMA snoop CASCADE;
DROP ROLE stats_snoop;
SELECT count(*) FILTER (WHERE database = 'fenced_lock_stats_elsewhere') AS seen_by_superuser
  FROM fenced_lock_stats;
DROP DATABASE fenced_lock_stats_elsewhere;

DROP TABLE stats_jobs, stats_guarded, stats_log;
DROP FUNCTION ns_stats(int4);
DROP VIEW own_stats;
DELETE FROM fenced_namespaces WHERE ns = 4204;
REVOKE EXECUTE ON FUNCTION fenced_lock_stats_reset() FROM stats_reader;
DROP ROLE stats_reader, stats_monitor;
DELETE FROM fence_ledger WHERE resource = 'stats://r';
DELETE FROM fenced_lease_state WHERE ns = 4203;

-- Every row goes at a reset (fourth review of 0.4.0, item 2: rows stayed for good).
SELECT fenced_lock_stats_reset() IS NOT NULL AS reset;
SELECT count(*) FILTER (WHERE dbid IS NOT NULL) AS rows_after_reset FROM fenced_lock_stats;
