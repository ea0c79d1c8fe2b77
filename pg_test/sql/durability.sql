-- Durable tokens: the WAL behind a returned token is already flushed. (durability_1.out: an
-- installation without the pageinspect module, as the PostgreSQL 16 wheel, cannot read the
-- sequence's page; the fault suite checks durability on 15.)
\set SHOW_CONTEXT never
-- Terse: where the module is missing, the error's DETAIL names the installation's path.
\set VERBOSITY terse
CREATE EXTENSION pageinspect;
\set VERBOSITY default

-- The setting exists once the library is loaded: at the first fenced_lock call of a session,
-- by LOAD, or at server start with shared_preload_libraries.
LOAD 'fenced_lock';
SHOW fenced_lock.durable_tokens;
-- Typos in the fenced_lock prefix are reported, not silently kept.
SET fenced_lock.durable_token = off;
\echo :LAST_ERROR_SQLSTATE

-- 40 grants draw past the 32 values nextval logs ahead, so this transaction writes a fresh
-- sequence record; it must be on disk before the last token is returned.
BEGIN;
SELECT count(acquire_fenced(8001, g)) AS grants FROM pg_catalog.generate_series(1, 40) g;
SELECT (page_header(get_raw_page('fencing_token_seq', 0))).lsn
       <= pg_catalog.pg_current_wal_flush_lsn() AS token_wal_flushed;
COMMIT;

-- Only a superuser may turn it off: a token issued without it may be issued again after a
-- crash, to any session.
CREATE ROLE fenced_lock_user LOGIN;
SET ROLE fenced_lock_user;
SET fenced_lock.durable_tokens = off;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE fenced_lock_user;

-- Off, tokens are still issued and still rise.
SET fenced_lock.durable_tokens = off;
BEGIN;
SELECT acquire_fenced(8002, 1) AS t1 \gset
SELECT acquire_fenced(8002, 2) > :t1 AS rising_when_off;
COMMIT;
RESET fenced_lock.durable_tokens;

DROP EXTENSION pageinspect;
