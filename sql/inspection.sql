-- The namespace registry: names for the first int4 of a fenced lock key.
CREATE TABLE fenced_namespaces (
    ns int4 PRIMARY KEY,
    name text NOT NULL CONSTRAINT fenced_namespaces_name_key UNIQUE,
    description text,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE fenced_namespaces IS
    'fenced_lock: registered namespaces, the first int4 of a fenced lock key, by name.';
-- Readable by all; written by the extension owner and the roles it grants INSERT to.
REVOKE ALL ON TABLE fenced_namespaces FROM PUBLIC;
GRANT SELECT ON TABLE fenced_namespaces TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('fenced_namespaces', '');
