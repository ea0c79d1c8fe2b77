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

-- A floor of any value a token can take is read (fourth review of 0.4.0, item 1: one of 19
-- digits was ignored, the new extension started at the clock, the resource refused its holders
-- and accepted the old holder's late write, and the next DROP lowered the floor). 10^18 - 1 and
-- 10^18 (18 and 19 digits), 2^62 (advance_fencing_tokens' limit) and 2^63 - 2.
SELECT last_value AS position_before_floors FROM fencing_token_seq \gset
CREATE FUNCTION pg_temp.reinstall_above(floor bigint) RETURNS TABLE (started_above boolean, floor_kept boolean)
LANGUAGE plpgsql AS $$
DECLARE
    kept text;
BEGIN
    PERFORM pg_catalog.setval('fencing_token_seq', floor);
    DROP EXTENSION fenced_lock;
    kept := (SELECT substr(c, 25) FROM pg_db_role_setting s, unnest(s.setconfig) c
              WHERE s.setrole = 0 AND c LIKE 'fenced_lock.token_floor=%'
                AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()));
    CREATE EXTENSION fenced_lock;
    -- The next nextval is above the floor.
    started_above := (SELECT CASE WHEN is_called THEN last_value >= floor ELSE last_value > floor END
                        FROM fencing_token_seq);
    floor_kept := kept = floor::text;
    RETURN NEXT;
END $$;
SELECT floor, r.* FROM unnest(ARRAY[999999999999999999, 1000000000000000000, 4611686018427387904,
                                    9223372036854775806]) floor,
                  LATERAL pg_temp.reinstall_above(floor) r;
-- At 2^63 - 2 no block of tokens fits below the end of bigint: 2200H, never a wrapped value.
BEGIN;
SELECT acquire_fenced(6001, 8);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- The first token is above a 19-digit floor, and the floor stays when a drop comes from below.
DROP EXTENSION fenced_lock;
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET fenced_lock.token_floor = %L', current_database(), '2000000000000000000'); END $$;
CREATE EXTENSION fenced_lock;
BEGIN;
SELECT acquire_fenced(6001, 7) > 2000000000000000000 AS above_a_19_digit_floor;
COMMIT;
SELECT setval('fencing_token_seq', 1000);
DROP EXTENSION fenced_lock;
SELECT substr(c, 25) AS floor_after_a_drop_from_below
  FROM pg_db_role_setting s, unnest(s.setconfig) c
 WHERE s.setrole = 0 AND c LIKE 'fenced_lock.token_floor=%'
   AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database());
-- A floor that cannot be read is refused, never ignored: CREATE EXTENSION and the DROP that
-- would overwrite it fail with 22023 and say which setting to mend.
\set VERBOSITY default
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET fenced_lock.token_floor = %L', current_database(), '9223372036854775808'); END $$;
CREATE EXTENSION fenced_lock;
\echo :LAST_ERROR_SQLSTATE
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET fenced_lock.token_floor = %L', current_database(), '12e5'); END $$;
CREATE EXTENSION fenced_lock;
\echo :LAST_ERROR_SQLSTATE
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET fenced_lock.token_floor = %L', current_database(), '2000000000000000001'); END $$;
CREATE EXTENSION fenced_lock;
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET fenced_lock.token_floor = %L', current_database(), 'high'); END $$;
DROP EXTENSION fenced_lock;
\echo :LAST_ERROR_SQLSTATE
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET fenced_lock.token_floor = %L', current_database(), '2000000000000000001'); END $$;
\set VERBOSITY terse

-- Under session_replication_role = replica (a logical replication apply worker, pg_restore
-- --disable-triggers) the event trigger fires too (item 13: it did not, and kept no floor).
SELECT setval('fencing_token_seq', 3000000000000000000);
SET session_replication_role = replica;
DROP EXTENSION fenced_lock;
RESET session_replication_role;
SELECT substr(c, 25) AS floor_kept_under_replica_role
  FROM pg_db_role_setting s, unnest(s.setconfig) c
 WHERE s.setrole = 0 AND c LIKE 'fenced_lock.token_floor=%'
   AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database());
-- The suites after this one go on from the tokens before these floors.
SELECT format('ALTER DATABASE %I SET fenced_lock.token_floor = %L', current_database(),
              :position_before_floors) AS restore_floor \gset
:restore_floor;
CREATE EXTENSION fenced_lock;
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I RESET fenced_lock.token_floor', current_database()); END $$;
