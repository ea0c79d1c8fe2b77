-- DROP EXTENSION and CREATE EXTENSION in one session: the cached sequence must follow.
\set SHOW_CONTEXT never
BEGIN;
SELECT acquire_fenced(6001, 1) AS before_drop \gset
COMMIT;

SELECT ((date_part('epoch', clock_timestamp()) - 946684800) * 1000000)::bigint
    AS clock_before_create \gset
DROP EXTENSION fenced_lock;
CREATE EXTENSION fenced_lock;
-- The new extension's new sequence starts at the clock (microseconds since 2000-01-01), above
-- every token the dropped one issued: resources that kept its tokens accept the new holders.
BEGIN;
SELECT acquire_fenced(6001, 1) AS first_token_of_new_sequence \gset
SELECT :first_token_of_new_sequence > :before_drop AS above_the_dropped_extensions_tokens,
       :first_token_of_new_sequence > :clock_before_create AS above_the_clock,
       :first_token_of_new_sequence < 2 ^ 53 AS exact_in_javascript;
SELECT acquire_fenced(6001, 2) > :first_token_of_new_sequence AS second_token_rises;
SELECT acquire_fenced(6001, 2) AS second \gset
COMMIT;

-- Also within one transaction, and after a rolled-back re-creation.
BEGIN;
DROP EXTENSION fenced_lock;
CREATE EXTENSION fenced_lock;
SELECT acquire_fenced(6001, 3) > :clock_before_create AS token_in_same_transaction_above_clock;
ROLLBACK;
-- The sequence of before the rolled-back re-creation is back: its tokens continue above
-- every number drawn from it (with the shared allocator, above its reserved block).
BEGIN;
SELECT acquire_fenced(6001, 3) > :second AS token_after_rolled_back_recreate_above;
COMMIT;

-- A server whose clock ran fast issued tokens above what the clock says once it is corrected
-- (third review of 0.3.0, item 8): here, tokens 400 days ahead of the clock. DROP EXTENSION
-- keeps the last of them as the database's fenced_lock.token_floor, and a re-created extension
-- starts above it, not at the clock, so resources that kept those tokens accept its holders.
SELECT setval('fencing_token_seq',
              ((date_part('epoch', clock_timestamp() + interval '400 days') - 946684800)
               * 1000000)::bigint) AS issued_while_fast \gset
DROP EXTENSION fenced_lock;
SELECT substr(c, 25)::bigint = :issued_while_fast AS floor_kept
  FROM pg_db_role_setting s, unnest(s.setconfig) c
 WHERE s.setrole = 0 AND c LIKE 'fenced_lock.token_floor=%'
   AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database());
CREATE EXTENSION fenced_lock;
BEGIN;
SELECT acquire_fenced(6001, 4) > :issued_while_fast AS above_what_the_fast_clock_issued;
COMMIT;
-- The floor only rises: a drop of an extension whose tokens are below it keeps it.
SELECT setval('fencing_token_seq', 1000);
DROP EXTENSION fenced_lock;
CREATE EXTENSION fenced_lock;
BEGIN;
SELECT acquire_fenced(6001, 5) > :issued_while_fast AS still_above;
COMMIT;
-- One event trigger, the extension's own (dropped and created with it).
SELECT count(*) AS event_triggers FROM pg_event_trigger WHERE evtname = 'fenced_lock_keep_token_floor';
-- It stands in no DROP's way: not an unrelated DROP SCHEMA, not the DROP EXTENSION of an
-- installation being repaired whose sequence was detached and dropped (that keeps no floor).
CREATE SCHEMA unrelated;
DROP SCHEMA unrelated;
ALTER EXTENSION fenced_lock DROP SEQUENCE fencing_token_seq;
DROP SEQUENCE fencing_token_seq;
DROP EXTENSION fenced_lock;
CREATE EXTENSION fenced_lock;
BEGIN;
SELECT acquire_fenced(6001, 6) > :issued_while_fast AS floor_kept_through_the_repair;
COMMIT;
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I RESET fenced_lock.token_floor', current_database()); END $$;
