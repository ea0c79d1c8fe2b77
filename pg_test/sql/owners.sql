-- Session grants with an owner (a client-chosen id). Behind a transaction-mode pooler one
-- server session serves many clients in turn: a held session grant goes back only to the owner
-- it was taken for. Each call below could come from another client on the same server session.
\set SHOW_CONTEXT never
\set VERBOSITY default

-- Client A becomes leader; A again gets the same term.
SELECT try_acquire_fenced_session(7201, 1, 'client-a') AS term_a \gset
SELECT try_acquire_fenced_session(7201, 1, 'client-a') = :term_a AS same_owner_same_term;
-- Client B, on the same server session: NULL, not A's term (0.1.0 returned A's term).
SELECT try_acquire_fenced_session(7201, 1, 'client-b') IS NULL AS other_owner_gets_null;
SELECT try_acquire_fenced_session(7201, 1) IS NULL AS no_owner_gets_null;
SELECT try_acquire_fenced_session(7201, 1, 'client-b') IS NULL AS try_other_owner_null;
-- The waiting forms raise 55000 with a HINT about poolers, rather than wait on themselves.
SELECT acquire_fenced_session(7201, 1, owner => 'client-b');
SELECT acquire_fenced_session(7201, 1, '1s', 'client-b');
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced_session(7201, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced_session(7201, 1, owner => 'client-a') = :term_a AS owner_waiting_form_same;
SELECT acquire_fenced_session(7201, 1, '0', 'client-a') = :term_a AS owner_timeout_form_same;
SELECT try_acquire_fenced_session(7201, 1, 'client-a') = :term_a AS owner_try_form_same;

-- fenced_locks shows the owner (this server preloads fenced_lock).
SELECT ns, id, scope, owner, token = :term_a AS token FROM fenced_locks WHERE ns = 7201;
SELECT owner, term = :term_a AS term FROM (SELECT pid, application_name, client_addr, token AS term, acquired_at AS since, owner FROM fenced_locks WHERE ns = 7201 AND id = 1 AND granted AND mode = 'exclusive') AS leader;

-- Only the owner releases: B and an ownerless release get false with a WARNING.
SELECT release_fenced(7201, 1, 'client-b') AS other_owner_released;
SELECT release_fenced(7201, 1) AS no_owner_released;
SELECT current_fence(7201, 1) IS NULL AS hidden_from_an_ownerless_caller,
       current_fence(7201, 1, 'client-b') IS NULL AS hidden_from_another_owner,
       current_fence(7201, 1, 'client-a') = :term_a AS still_held_for_its_owner;
SELECT release_fenced(7201, 1, 'client-a') AS owner_released;
-- Then B takes it with a new, larger term.
SELECT try_acquire_fenced_session(7201, 1, 'client-b') > :term_a AS b_leads_with_larger_term;
SELECT release_fenced(7201, 1, 'client-b');

-- An ownerless grant is not released by a caller that names an owner.
SELECT acquire_fenced_session(7201, 2) > 0 AS ownerless_grant;
SELECT release_fenced(7201, 2, 'client-a') AS owner_cannot_release_ownerless;
SELECT release_fenced(7201, 2) AS ownerless_release;

-- Named forms take an owner too.
SELECT register_namespace('owners') > 0 AS registered;
SELECT try_acquire_fenced_session_named('owners', 'job', 'client-a') AS term_named \gset
SELECT try_acquire_fenced_session_named('owners', 'job', 'client-b') IS NULL AS named_other_owner_null;
SELECT try_acquire_fenced_session_named('owners', 'job', 'client-a') = :term_named AS named_same;
SELECT acquire_fenced_session_named('owners', 'job', owner => 'client-a') = :term_named AS named_owned;
SELECT try_acquire_fenced_session_named('owners', 77::text, 'client-a') > :term_named AS bigint_form;
SELECT release_fenced_named('owners', 'job', 'client-a') AS named_released;
SELECT release_fenced_named('owners', 77::text, 'client-a') AS bigint_released;

-- A NULL owner is the default, no owner: the ownerless lock, busy for a second ownerless try
-- as for any other caller, released by the ownerless release.
SELECT try_acquire_fenced_session(7201, 3, NULL) > 0 AS ownerless_by_null;
SELECT try_acquire_fenced_session(7201, 3, NULL) IS NULL AS busy_again,
       current_fence(7201, 3) > 0 AS held_without_owner;
SELECT acquire_fenced_session(7201, 3, owner => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT release_fenced(7201, 3, NULL) AS released_by_null;

-- current_fence and release_all_fenced follow the owner rule too: behind a pooler, another
-- client on this server session neither sees nor frees a lock taken for an owner.
SELECT try_acquire_fenced_session(7201, 5, 'client-a') AS term_5 \gset
SELECT acquire_fenced_session(7201, 6) AS term_6 \gset
SELECT current_fence(7201, 5) IS NULL AS owned_hidden_from_ownerless,
       current_fence(7201, 5, 'client-b') IS NULL AS owned_hidden_from_other_owner,
       current_fence(7201, 5, 'client-a') = :term_5 AS owned_shown_to_its_owner,
       current_fence(7201, 6) = :term_6 AS ownerless_shown_to_ownerless,
       current_fence(7201, 6, 'client-a') IS NULL AS ownerless_hidden_from_an_owner;
SELECT release_all_fenced() AS ownerless_released;
SELECT current_fence(7201, 5, 'client-a') = :term_5 AS owned_still_held;
SELECT release_all_fenced('client-b') AS other_owner_released;
SELECT release_all_fenced('client-a') AS owner_released;
SELECT count(*) AS locks_left FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 7201 AND pid = pg_backend_pid();
-- A transaction grant has no owner: the two-argument form shows it, the owner form does not.
BEGIN;
SELECT acquire_fenced(7201, 7) AS term_7 \gset
SELECT current_fence(7201, 7) = :term_7 AS transaction_grant_shown,
       current_fence(7201, 7, 'client-a') IS NULL AS hidden_from_an_owner;
COMMIT;
-- Named forms.
SELECT try_acquire_fenced_session_named('owners', 'job2', 'client-a') AS term_named2 \gset
SELECT current_fence_named('owners', 'job2') IS NULL AS named_hidden,
       current_fence_named('owners', 'job2', 'client-a') = :term_named2 AS named_shown,
       current_fence_named('owners', 78::text, 'client-a') IS NULL AS bigint_not_held;
SELECT release_all_fenced('client-a') AS named_released;
SELECT current_fence(7201, 5, NULL) IS NULL AS null_owner_is_none,
       release_all_fenced(NULL) AS null_owner_releases_ownerless;

-- DISCARD ALL (what poolers run between clients) ends owned grants like any other.
SELECT try_acquire_fenced_session(7201, 4, 'client-a') AS term_4 \gset
DISCARD ALL;
SELECT try_acquire_fenced_session(7201, 4, 'client-b') > :term_4 AS next_client_new_term;
SELECT release_all_fenced() AS ownerless_release_all_leaves_it;
SELECT release_all_fenced('client-b') AS released_all;
DELETE FROM fenced_namespaces WHERE name = 'owners';
