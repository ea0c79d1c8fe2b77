-- The lease functions write fenced_lease_state directly (the heap, then each index, as
-- PostgreSQL writes its catalogs), not through statements. An update that cannot stay on its
-- page (not HOT) must add the new version to the primary key, or the lease is lost to every
-- later call; a table with a trigger or an index those writes cannot maintain is refused.
SET client_min_messages = warning;

-- 200 leases with long owners fill their pages, so that renewals inside one transaction
-- (the old versions still live) must move rows to other pages.
CREATE TEMP TABLE taken AS
SELECT id, try_acquire_lease(7701, id, repeat('o', 200) || id, '1 hour') AS token
  FROM generate_series(1, 200) id;
SELECT count(token) AS taken FROM taken;
CREATE TEMP TABLE first_places AS
SELECT id, (ctid::text::point)[0] AS page FROM fenced_lease_state WHERE ns = 7701;
SELECT count(renew_lease(7701, id, token, '2 hours')) AS renewed FROM taken;
SELECT count(*) > 0 AS some_moved_to_another_page
  FROM fenced_lease_state s JOIN first_places f USING (id)
 WHERE s.ns = 7701 AND (s.ctid::text::point)[0] <> f.page;

-- Every lease is still found through the primary key, with its token and its renewal.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT token FROM fenced_lease_state WHERE ns = 7701 AND id = 1;
SELECT count(*) AS renewed_through_the_key
  FROM taken t
 WHERE (SELECT s.token FROM fenced_lease_state s WHERE s.ns = 7701 AND s.id = t.id) = t.token
   AND (SELECT s.expires_at FROM fenced_lease_state s WHERE s.ns = 7701 AND s.id = t.id)
       > clock_timestamp() + interval '90 minutes';
RESET enable_seqscan;
RESET enable_bitmapscan;

-- The lease functions find them the same way: each renews and releases once more.
SELECT count(renew_lease(7701, id, token, '1 hour')) AS renewed_again,
       count(*) FILTER (WHERE release_lease(7701, id, token)) AS released
  FROM taken;
-- Released rows are free for another owner, with a new, larger token.
SELECT count(*) AS taken_over
  FROM taken t
 WHERE try_acquire_lease(7701, t.id, 'next-owner', '1 minute') > t.token;
SELECT count(*) AS found_by_the_new_owner
  FROM taken t
 WHERE release_lease(7701, t.id, (SELECT token FROM fenced_lease_state s
                                   WHERE s.ns = 7701 AND s.id = t.id));

-- A plain index of the DBA's own is maintained too.
CREATE INDEX lease_by_owner ON fenced_lease_state (owner);
SELECT try_acquire_lease(7702, 1, 'indexed-owner', '1 minute') IS NOT NULL AS taken;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM fenced_lease_state WHERE owner = 'indexed-owner';
SELECT id FROM fenced_lease_state WHERE owner = 'indexed-owner';
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX lease_by_owner;

-- What the direct writes cannot maintain is refused (55000) when a call would write, and the
-- lease is left as it was.
CREATE FUNCTION lease_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER lease_audit AFTER INSERT OR UPDATE ON fenced_lease_state
    FOR EACH ROW EXECUTE FUNCTION lease_audit();
SELECT try_acquire_lease(7702, 2, 'refused', '1 minute');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER lease_audit ON fenced_lease_state;
CREATE INDEX lease_by_lower_owner ON fenced_lease_state (lower(owner));
SELECT try_acquire_lease(7702, 2, 'refused', '1 minute');
\echo :LAST_ERROR_SQLSTATE
DROP INDEX lease_by_lower_owner;
CREATE INDEX lease_open ON fenced_lease_state (expires_at) WHERE owner IS NOT NULL;
SELECT try_acquire_lease(7702, 2, 'refused', '1 minute');
\echo :LAST_ERROR_SQLSTATE
DROP INDEX lease_open;
SELECT count(*) AS rows_written_while_refused FROM fenced_lease_state WHERE ns = 7702 AND id = 2;
SELECT try_acquire_lease(7702, 2, 'accepted', '1 minute') IS NOT NULL AS taken_once_dropped;

DELETE FROM fenced_lease_state WHERE ns IN (7701, 7702);
DROP FUNCTION lease_audit();
