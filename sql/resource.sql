-- The fence ledger: the highest token accepted per resource outside the database.
CREATE TABLE fence_ledger (
    resource text PRIMARY KEY,
    token bigint NOT NULL,
    updated_at timestamptz NOT NULL
);
COMMENT ON TABLE fence_ledger IS
    'fenced_lock: highest fencing token accepted per resource name, written by fence_check '
    'and fence_check_or_false.';
-- Readable by every role (operators); written only through the functions.
REVOKE ALL ON TABLE fence_ledger FROM PUBLIC;
GRANT SELECT ON TABLE fence_ledger TO PUBLIC;
-- pg_dump carries the ledger with the data.
SELECT pg_catalog.pg_extension_config_dump('fence_ledger', '');

-- Bare C functions: they may raise fenced_lock's own SQLSTATE SF001 (stale fencing token), and
-- an error raised by fenced_update's UPDATE (SF001 from enforce_fence, a domain's custom code)
-- reaches the caller with its own SQLSTATE. Their C symbols keep the meanings they had in
-- released versions (src/resource/mod.rs).
CREATE FUNCTION fence_check(resource text, token bigint) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = @extschema@, pg_temp
    AS 'MODULE_PATHNAME', 'fence_check_strict';

CREATE FUNCTION fence_check_or_false(resource text, token bigint) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = @extschema@, pg_temp
    AS 'MODULE_PATHNAME', 'fence_check_wrapper';

CREATE FUNCTION enforce_fence() RETURNS trigger
    LANGUAGE c
    AS 'MODULE_PATHNAME', 'enforce_fence';

-- fenced_update: the write and the check in one statement, SF001 when superseded. The forms
-- with a table name and/or an id given as text are what untyped driver parameters resolve to
-- (unknown prefers text): the name is looked up as regclass input would; a text id is read as
-- the key column's type. So no driver needs a cast for int, bigint, uuid or text keys, nor a
-- regclass type of its own. Typed ids of any type take the anyelement forms.
CREATE FUNCTION fenced_update(
    target regclass,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update(
    target regclass,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update(
    target text,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

CREATE FUNCTION fenced_update(
    target text,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update_strict';

-- fenced_update_or_false: the same four forms, returning false when superseded.
CREATE FUNCTION fenced_update_or_false(
    target regclass,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

CREATE FUNCTION fenced_update_or_false(
    target regclass,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

CREATE FUNCTION fenced_update_or_false(
    target text,
    id anyelement,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';

CREATE FUNCTION fenced_update_or_false(
    target text,
    id text,
    token bigint,
    changes jsonb DEFAULT '{}',
    key_column text DEFAULT 'id',
    fence_column text DEFAULT 'fence'
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'fenced_update';
