-- Table-backed leases (src/leases/): one row per key (and permit slot) held, or expired and not
-- yet taken over or swept; a release deletes its row (before 0.4.0 it set owner NULL). Tokens
-- come from the one sequence, so a key's next holder gets a larger token whatever its row.
-- holder is the role that acquired (only it, or its members, renew and release).
CREATE TABLE fenced_lease_state (
    ns int4 NOT NULL,
    id int4 NOT NULL,
    key text,
    owner text,
    holder regrole,
    token bigint NOT NULL,
    acquired_at timestamptz,
    renewed_at timestamptz,
    expires_at timestamptz,
    -- After an unreleased expiry, other owners wait this long too (fenced_lock.lease_lock_delay).
    lock_delay interval NOT NULL DEFAULT '0',
    -- A permit's slot (acquire_lease_permit, 1..permits); 0 for the key's lease itself.
    slot int4 NOT NULL DEFAULT 0,
    PRIMARY KEY (ns, id, slot)
);
COMMENT ON TABLE fenced_lease_state IS
    'fenced_lock: the state of every lease (acquire_lease); read it through fenced_leases.';
-- Readable by all; written only by the lease functions, which write as the table's owner.
REVOKE ALL ON TABLE fenced_lease_state FROM PUBLIC;
GRANT SELECT ON TABLE fenced_lease_state TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('fenced_lease_state', '');
