-- fenced_lock 0.4.0 -> 1.0.0. Every SQL change since 0.4.0, so that an upgraded database
-- equals a fresh 1.0.0 install (pg_test/upgrade/catalog.sql compares them), privileges a DBA
-- granted or revoked included: objects are changed in place, never dropped and re-created.
\echo Use "ALTER EXTENSION fenced_lock UPDATE TO '1.0.0'" to load this file. \quit

-- The token floor is read for every value a token can take (0.4.0 ignored one of 19 digits:
-- a re-created extension started at the clock, below tokens resources kept, and the next
-- DROP lowered the floor); one that is not a token is refused (22023).
CREATE FUNCTION fenced_lock_kept_token_floor() RETURNS bigint
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kept text := (SELECT pg_catalog.substr(c, 25)
                    FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) c
                   WHERE s.setrole = 0
                     AND s.setdatabase = (SELECT oid FROM pg_catalog.pg_database
                                           WHERE datname = pg_catalog.current_database())
                     AND pg_catalog.starts_with(c, 'fenced_lock.token_floor='));
BEGIN
    IF kept IS NULL THEN
        RETURN 0;
    END IF;
    IF kept !~ '^[0-9]{1,19}$' OR kept::numeric > 9223372036854775807 THEN
        RAISE EXCEPTION 'this database''s fenced_lock.token_floor is not a token: "%"', kept
              USING ERRCODE = 'invalid_parameter_value',
                    DETAIL = 'The floor is the last token an earlier installation of fenced_lock '
                             'in this database issued; a new one starts above it. It must be a '
                             'whole number from 0 to 9223372036854775807.',
                    HINT = 'Set it to the highest token any installation in this database '
                           'issued (ALTER DATABASE ... SET fenced_lock.token_floor = ''N''), or '
                           'RESET it if none did.';
    END IF;
    RETURN kept::bigint;
END
$$;
REVOKE ALL ON FUNCTION fenced_lock_kept_token_floor() FROM PUBLIC;
COMMENT ON FUNCTION fenced_lock_kept_token_floor() IS
    'fenced_lock: the database''s fenced_lock.token_floor as a token (0 when unset); 22023 when '
    'it is not one.';

-- A database where 0.4.0 ignored its floor issues tokens above it from now on (setval retires
-- the shared allocator's block).
SELECT pg_catalog.setval('@extschema@.fencing_token_seq', fenced_lock_kept_token_floor())
 WHERE fenced_lock_kept_token_floor() > (SELECT last_value FROM @extschema@.fencing_token_seq);

CREATE OR REPLACE FUNCTION fenced_lock_keep_token_floor() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    token_sequence regclass := (SELECT c.oid FROM pg_catalog.pg_class c
                                 WHERE c.oid = pg_catalog.to_regclass('@extschema@.fencing_token_seq')
                                   AND c.relkind = 'S');
    issued bigint := pg_catalog.pg_sequence_last_value(token_sequence);
BEGIN
    -- A sequence detached and dropped (an installation being repaired) keeps no floor and
    -- stops no DROP. A kept floor that is not a token stops it (22023).
    IF issued IS NULL THEN
        RETURN;
    END IF;
    IF issued > @extschema@.fenced_lock_kept_token_floor() THEN
        EXECUTE pg_catalog.format('ALTER DATABASE %I SET fenced_lock.token_floor = %L',
                                  pg_catalog.current_database(), issued::text);
    END IF;
END
$$;

-- The event trigger fires under session_replication_role = replica too (a logical
-- replication worker, a restore with triggers disabled): 0.4.0 kept no floor there.
ALTER EVENT TRIGGER fenced_lock_keep_token_floor ENABLE ALWAYS;
