-- Text arguments (namespaces, keys, owners) are read as UTF-8.
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.<>) 'UTF8' THEN
        RAISE EXCEPTION 'fenced_lock requires a UTF8 database; this one is %',
                        pg_catalog.getdatabaseencoding()
              USING ERRCODE = 'feature_not_supported',
                    HINT = 'Create the database with ENCODING ''UTF8'' (TEMPLATE template0).';
    END IF;
END
$$;

-- The source of fencing tokens. CACHE 1 so that values are handed out in call order across
-- backends; NO CYCLE so that a token can never come round again.
CREATE SEQUENCE fencing_token_seq AS bigint START WITH 1 INCREMENT BY 1 CACHE 1 NO CYCLE;

COMMENT ON SEQUENCE fencing_token_seq IS
    'fenced_lock: source of fencing tokens. Only the extension owner may read or move it; '
    'acquire_fenced draws from it for every role.';

-- The database's fenced_lock.token_floor: the last token an earlier installation in this
-- database issued, which its DROP EXTENSION kept (fenced_lock_keep_token_floor below); 0 when
-- unset. Any value a token can take is read (up to 2^63 - 1, 19 digits); one that is not such a
-- number is refused, never ignored: ignored, a re-created extension could start below tokens
-- resources kept, and the next DROP would lower the floor.
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

-- Tokens start above the clock: microseconds since 2000-01-01 (about 8.5e14 in 2026, far
-- below 2^53, so they stay exact in JavaScript for two centuries), and above the database's
-- kept token floor: a re-created extension starts above every token the dropped one issued
-- even if the clock was wrong (fast then, or set back since). A new cluster, or a schema
-- restored without the sequence's data, has only the clock. Never below 1, whatever the clock
-- says.
SELECT pg_catalog.setval('fencing_token_seq', GREATEST(
           1,
           ((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) - 946684800)
            * 1000000)::bigint,
           fenced_lock_kept_token_floor()));

-- Functions draw from the sequence without a privilege check; nobody else needs rights on it.
REVOKE ALL ON SEQUENCE fencing_token_seq FROM PUBLIC;

-- Let pg_dump carry the sequence's position, so a restored database keeps issuing larger tokens.
SELECT pg_catalog.pg_extension_config_dump('fencing_token_seq', '');

-- DROP EXTENSION (also DROP SCHEMA or DROP OWNED, which can drop it) keeps the last token this
-- installation issued as the database's fenced_lock.token_floor, in the shared catalog
-- pg_db_role_setting, which survives the extension, replicates to standbys and is restored
-- by pg_dump --create: the next CREATE EXTENSION starts above it. The floor only
-- rises. It runs before the command, while the sequence exists, and as the extension's owner.
CREATE FUNCTION fenced_lock_keep_token_floor() RETURNS event_trigger
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
REVOKE ALL ON FUNCTION fenced_lock_keep_token_floor() FROM PUBLIC;
COMMENT ON FUNCTION fenced_lock_keep_token_floor() IS
    'fenced_lock: the event trigger function that keeps the last token issued as the '
    'database''s fenced_lock.token_floor before DROP EXTENSION (or DROP SCHEMA, DROP OWNED).';

CREATE EVENT TRIGGER fenced_lock_keep_token_floor ON ddl_command_start
    WHEN TAG IN ('DROP EXTENSION', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION fenced_lock_keep_token_floor();
-- Also under session_replication_role = replica (a logical replication worker, a restore with
-- triggers disabled): a drop there keeps the floor as well.
ALTER EVENT TRIGGER fenced_lock_keep_token_floor ENABLE ALWAYS;
