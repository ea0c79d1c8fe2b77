-- Table-backed leases: an owner, a TTL on the database's clock, renew and release by token.
-- Every call commits on its own (psql's autocommit here), as through a pooler.
\set SHOW_CONTEXT never

-- A free key: a token. The same owner again: the same token, the TTL extended. Another
-- owner: NULL.
SELECT try_acquire_lease(7301, 1, 'worker-a', '1 minute') AS a1 \gset
SELECT expires_at AS a1_expiry FROM fenced_leases WHERE ns = 7301 AND id = 1 \gset
SELECT try_acquire_lease(7301, 1, 'worker-a', '2 minutes') = :a1 AS same_owner_same_token;
SELECT expires_at > :'a1_expiry' AS extended FROM fenced_leases WHERE ns = 7301 AND id = 1;
SELECT try_acquire_lease(7301, 1, 'worker-b', '1 minute') IS NULL AS other_owner_null;

-- fenced_leases: one row per held lease.
SELECT ns, id, owner, role = current_user::regrole AS my_role, token = :a1 AS token,
       acquired_at <= renewed_at AS renewed_after_acquired,
       expires_at > clock_timestamp() + interval '1 minute' AS expires_in_2_minutes, expired
  FROM fenced_leases WHERE ns = 7301;

-- Renew with the token: the new expiry. A wrong token: NULL.
SELECT renew_lease(7301, 1, :a1, '5 minutes') > clock_timestamp() + interval '4 minutes'
       AS renewed;
SELECT renew_lease(7301, 1, :a1 + 1000, '5 minutes') IS NULL AS wrong_token_null;
SELECT release_lease(7301, 1, :a1 + 1000) AS wrong_token_not_released;

-- Release: true once; then the key is free and a new holder gets a larger token.
SELECT release_lease(7301, 1, :a1) AS released;
SELECT release_lease(7301, 1, :a1) AS released_twice;
SELECT renew_lease(7301, 1, :a1, '1 minute') IS NULL AS renew_after_release_null;
SELECT count(*) AS leases_after_release FROM fenced_leases WHERE ns = 7301;
SELECT try_acquire_lease(7301, 1, 'worker-b', '1 minute') > :a1 AS next_holder_larger_token;

-- Expiry: after the TTL another owner takes over with a larger token; the old holder's renew
-- and release then fail. Before the takeover, the expired lease is still its token's.
SELECT try_acquire_lease(7301, 2, 'worker-a', '20 ms') AS e1 \gset
SELECT pg_sleep(0.05);
SELECT expired FROM fenced_leases WHERE ns = 7301 AND id = 2;
SELECT renew_lease(7301, 2, :e1, '20 ms') IS NOT NULL AS expired_untaken_renews;
SELECT pg_sleep(0.05);
SELECT try_acquire_lease(7301, 2, 'worker-b', '1 minute') AS e2 \gset
SELECT :e2 > :e1 AS takeover_larger_token;
SELECT renew_lease(7301, 2, :e1, '1 minute') IS NULL AS old_holder_renew_null;
SELECT release_lease(7301, 2, :e1) AS old_holder_release_false;
-- The same owner after its own expiry gets a new token (the lease was up for grabs).
SELECT try_acquire_lease(7301, 3, 'worker-a', '10 ms') AS s1 \gset
SELECT pg_sleep(0.03);
SELECT try_acquire_lease(7301, 3, 'worker-a', '1 minute') > :s1 AS same_owner_after_expiry_new_token;

-- Waiting: 55P03 naming the holder when it keeps the lease through the timeout (or, without
-- one, through lock_timeout); the token once the holder's lease expires within the wait (the
-- waiter sleeps until the expiry, it does not poll).
SELECT acquire_lease(7301, 2, 'worker-c', '1 minute', '50 ms');
\echo :LAST_ERROR_SQLSTATE
SET lock_timeout = '50ms';
SELECT acquire_lease(7301, 2, 'worker-c', '1 minute');
\echo :LAST_ERROR_SQLSTATE
RESET lock_timeout;
SELECT try_acquire_lease(7301, 4, 'worker-a', '100 ms') AS w1 \gset
SELECT acquire_lease(7301, 4, 'worker-c', '1 minute', '10 s') > :w1 AS waited_for_expiry;
SELECT expires_at - acquired_at AS ttl FROM fenced_leases WHERE ns = 7301 AND id = 4;
SELECT acquire_lease(7301, 5, 'worker-a', '1 minute', '0') > 0 AS zero_wait_free_key;

-- Leases and advisory locks are separate key spaces.
BEGIN;
SELECT acquire_fenced(7301, 2) > :e2 AS advisory_lock_on_leased_key;
COMMIT;

-- Named forms.
SELECT register_namespace('lease_names') > 0 AS registered;
SELECT try_acquire_lease_named('lease_names', 'nightly', 'worker-a', '1 minute') AS n1 \gset
SELECT namespace, key, owner FROM fenced_leases WHERE namespace = 'lease_names';
SELECT try_acquire_lease_named('lease_names', 'nightly', 'worker-b', '1 minute') IS NULL AS named_busy;
SELECT renew_lease_named('lease_names', 'nightly', :n1, '1 minute') IS NOT NULL AS named_renewed;
SELECT release_lease_named('lease_names', 'nightly', :n1) AS named_released;
SELECT try_acquire_lease_named('lease_names', 42::text, 'worker-a', '1 minute') AS b1 \gset
SELECT try_acquire_lease_named('lease_names', '42', 'worker-b', '1 minute') IS NULL AS bigint_is_its_text;
SELECT release_lease_named('lease_names', 42::text, :b1) AS bigint_released;

-- Guards: NULL arguments 22004; a TTL that is not positive, or a negative wait, 22023.
SELECT try_acquire_lease(7301, 9, NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_lease(7301, 9, 'w', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_lease(NULL, 9, 'w', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_lease(7301, 9, 'w', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_lease(7301, 9, 'w', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_lease(7301, 9, 'w', '1 minute', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_lease(7301, 10, 'w', '1 minute', NULL) > 0 AS null_timeout_no_limit;
SELECT release_lease(7301, 10, (SELECT token FROM fenced_leases WHERE ns = 7301 AND id = 10));
SELECT renew_lease(7301, 9, NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT renew_lease(7301, 9, 1, '0');
\echo :LAST_ERROR_SQLSTATE
SELECT release_lease(7301, 9, NULL);
\echo :LAST_ERROR_SQLSTATE

-- The table is readable by all and written only through the functions; a role can renew or
-- release only leases its own role acquired, whatever token it read from the view.
CREATE ROLE lease_app_1;
CREATE ROLE lease_app_2;
SET ROLE lease_app_1;
SELECT try_acquire_lease(7301, 10, 'app', '1 minute') AS r1 \gset
UPDATE fenced_lease_state SET expires_at = now() WHERE ns = 7301;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM fenced_lease_state;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE lease_app_2;
SELECT count(*) AS readable FROM fenced_leases WHERE ns = 7301 AND id = 10;
SELECT renew_lease(7301, 10, :r1, '1 hour') IS NULL AS other_role_cannot_renew;
SELECT release_lease(7301, 10, :r1) AS other_role_cannot_release;
SELECT try_acquire_lease(7301, 10, 'app', '1 minute') IS NULL AS same_owner_other_role_null;
RESET ROLE;
SET ROLE lease_app_1;
SELECT release_lease(7301, 10, :r1) AS own_role_releases;
RESET ROLE;
DROP ROLE lease_app_1;
DROP ROLE lease_app_2;

-- A search_path that puts a role's own operators first changes nothing in the functions: they
-- run as the table's owner, and every name in their statements is qualified. (A new session,
-- so that they are prepared under this search_path.)
\c -
CREATE SCHEMA lease_trap;
CREATE FUNCTION lease_trap.int4_eq_trap(int4, int4) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR lease_trap.= (LEFTARG = int4, RIGHTARG = int4, FUNCTION = lease_trap.int4_eq_trap);
SET search_path = lease_trap, public, pg_catalog;
SELECT try_acquire_lease(7301, 11, 'trap', '1 minute') > 0 AS acquired;
SELECT count(*) AS leases_of_trap FROM public.fenced_leases WHERE owner OPERATOR(pg_catalog.=) 'trap';
RESET search_path;
DROP SCHEMA lease_trap CASCADE;

-- A read-only transaction writes no lease: 25006 from every lease function before it looks,
-- never a NULL ("busy") or false ("lost") that depends on what it would have found.
SELECT try_acquire_lease(7301, 12, 'reader', '1 hour') AS held_token \gset
BEGIN READ ONLY;
SELECT try_acquire_lease(7301, 12, 'other', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT renew_lease(7301, 12, :held_token, '1 minute');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT release_lease(7301, 12, :held_token + 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SET default_transaction_read_only = on;
SELECT release_lease(7301, 12, :held_token);
\echo :LAST_ERROR_SQLSTATE
RESET default_transaction_read_only;
SELECT release_lease(7301, 12, :held_token) AS released_read_write;

-- Leave no namespace behind for the suites that follow.
DELETE FROM fenced_namespaces WHERE name = 'lease_names';
