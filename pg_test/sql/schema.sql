-- CREATE EXTENSION fenced_lock SCHEMA fenced: every function, view and trigger works there,
-- called qualified or through search_path, and nothing of the extension lands in public.
\set SHOW_CONTEXT never
SELECT current_database() AS regress_database \gset
CREATE DATABASE fenced_lock_schema;
\c fenced_lock_schema
CREATE SCHEMA fenced;
CREATE EXTENSION fenced_lock SCHEMA fenced;
SELECT count(*) AS objects_in_public FROM pg_catalog.pg_proc
 WHERE pronamespace = 'public'::regnamespace;
SELECT n.nspname AS schema, count(*) AS functions
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE d.deptype = 'e'
   AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'fenced_lock')
 GROUP BY n.nspname ORDER BY 1;

-- Qualified, with search_path left alone: the lock, its token, the view.
BEGIN;
SELECT fenced.acquire_fenced(1001, 42) AS token \gset
SELECT fenced.current_fence(1001, 42) = :token AS current_fence_is_token;
SELECT count(*) AS shown FROM fenced.fenced_locks WHERE ns = 1001 AND id = 42 AND token = :token;
COMMIT;
-- A named key, a lease, a permit.
SELECT fenced.register_namespace('billing', 7) AS billing;
BEGIN;
SELECT fenced.acquire_fenced_named('billing', 'order:1') > :token AS named_key;
SELECT slot FROM fenced.acquire_permit(1001, 43, 2);
COMMIT;
SELECT fenced.try_acquire_lease(1001, 44, 'worker', '1 minute') AS lease \gset
SELECT owner FROM fenced.fenced_leases WHERE ns = 1001 AND id = 44;
SELECT fenced.release_lease(1001, 44, :lease) AS released;
-- The checks where data lives: fenced_update and the trigger on a table in public.
CREATE TABLE public.accounts (id int PRIMARY KEY, balance int, fence bigint);
INSERT INTO public.accounts VALUES (1, 100, NULL);
CREATE TRIGGER accounts_fence BEFORE UPDATE ON public.accounts
    FOR EACH ROW EXECUTE FUNCTION fenced.enforce_fence('fence');
SELECT fenced.fenced_update('accounts', 1, 20, '{"balance": 90}');
SELECT fenced.fenced_update_or_false('accounts', 1, 10, '{"balance": 0}') AS stale_written;
UPDATE public.accounts SET balance = 0, fence = 5 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
SELECT balance, fence FROM public.accounts;
SELECT fenced.fence_check('s3://bucket/a', 3);
SELECT resource, token FROM fenced.fence_ledger;
-- Through search_path, unqualified, as an application configured for the schema calls them.
SET search_path = fenced, public;
BEGIN;
SELECT acquire_fenced(1001, 45) > :token AS through_search_path;
COMMIT;
SELECT count(*) > 0 AS stats_rows FROM fenced_lock_stats;
RESET search_path;
-- Unqualified without it: not found (42883), never another object of the same name.
BEGIN;
SELECT acquire_fenced(1001, 46);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
DROP TABLE public.accounts;
DROP EXTENSION fenced_lock;
SELECT count(*) AS left_behind FROM pg_catalog.pg_namespace WHERE nspname = 'fenced_lock_internal';
\c :regress_database
DROP DATABASE fenced_lock_schema;
