-- fenced_lock 0.2.0 -> 0.3.0. Every SQL change since 0.2.0, so that an upgraded database
-- equals a fresh 0.3.0 install (pg_test/upgrade/catalog.sql compares them), privileges a DBA
-- granted or revoked included: objects are changed in place, never dropped and re-created.
\echo Use "ALTER EXTENSION fenced_lock UPDATE TO '0.3.0'" to load this file. \quit

-- Text arguments are read as UTF-8: a database in another encoding stays at 0.2.0.
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

-- Tokens continue from the clock (microseconds since 2000-01-01) when the sequence is behind
-- it, as a fresh install's start there: a re-created extension then starts above every token
-- this one issued. Tokens only rise, so every resource keeps accepting the new holders.
SELECT pg_catalog.setval('@extschema@.fencing_token_seq',
           GREATEST(last_value,
               ((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) - 946684800)
                * 1000000)::bigint))
  FROM @extschema@.fencing_token_seq;
