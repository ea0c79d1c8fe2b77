-- The source of fencing tokens. CACHE 1 so that values are handed out in call order across
-- backends; NO CYCLE so that a token can never come round again.
CREATE SEQUENCE fencing_token_seq AS bigint START WITH 1 INCREMENT BY 1 CACHE 1 NO CYCLE;

COMMENT ON SEQUENCE fencing_token_seq IS
    'fenced_lock: source of fencing tokens. Only the extension owner may read or move it; '
    'acquire_fenced draws from it for every role.';

-- Functions draw from the sequence without a privilege check; nobody else needs rights on it.
REVOKE ALL ON SEQUENCE fencing_token_seq FROM PUBLIC;

-- Let pg_dump carry the sequence's position, so a restored database keeps issuing larger tokens.
SELECT pg_catalog.pg_extension_config_dump('fencing_token_seq', '');
