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

-- Tokens start at the clock: microseconds since 2000-01-01 (about 8.5e14 in 2026, far below
-- 2^53, so they stay exact in JavaScript for two centuries). A re-created extension, a
-- schema restored without the sequence's data or a new cluster so starts above every token an
-- earlier installation issued, as long as that one drew fewer tokens than microseconds went
-- by (failover skips count: 10^9 is 1,000 seconds).
SELECT pg_catalog.setval('fencing_token_seq',
           ((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) - 946684800)
            * 1000000)::bigint);

-- Functions draw from the sequence without a privilege check; nobody else needs rights on it.
REVOKE ALL ON SEQUENCE fencing_token_seq FROM PUBLIC;

-- Let pg_dump carry the sequence's position, so a restored database keeps issuing larger tokens.
SELECT pg_catalog.pg_extension_config_dump('fencing_token_seq', '');
