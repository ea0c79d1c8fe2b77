-- Every guard of the transaction-scoped API, with its SQLSTATE.
\set SHOW_CONTEXT never

-- NULL arguments raise 22004, never a NULL that could read as "busy"; only a NULL timeout
-- (or owner) is allowed: it is the default, no limit of fenced_lock's own.
SELECT acquire_fenced(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced(1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced(NULL, 1, '1s');
\echo :LAST_ERROR_SQLSTATE
SELECT acquire_fenced(1, NULL, '1s');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT acquire_fenced(1, 1, NULL) > 0 AS null_timeout_waits_without_limit;
SELECT acquire_fenced(1, 5, '1s', NULL);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT try_acquire_fenced(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT try_acquire_fenced(1, NULL);
\echo :LAST_ERROR_SQLSTATE

-- A negative timeout raises 22023; so does one beyond the lock manager's range.
BEGIN;
SELECT acquire_fenced(1, 1, '-1 ms');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced(1, 1, '-1 day 2 hours');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT acquire_fenced(1, 1, '1 month');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- A sub-millisecond timeout still waits (rounds up), it does not error.
BEGIN;
SELECT acquire_fenced(1, 1, '1 microsecond') > 0 AS tiny_timeout_ok;
COMMIT;

-- Outside a transaction block: 25P01 (api_forms.sql). With
-- fenced_lock.outside_transaction = warning: succeeds, warns once per statement, the lock
-- ends with it.
SET fenced_lock.outside_transaction = warning;
SELECT acquire_fenced(1, 2) > 0 AS autocommit_token;
SELECT try_acquire_fenced(1, 3) > 0 AS autocommit_try_token;
SELECT count(acquire_fenced(1, g)) AS autocommit_many FROM pg_catalog.generate_series(10, 12) g;
SELECT count(*) AS still_held FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();
RESET fenced_lock.outside_transaction;
-- Inside BEGIN ... COMMIT there is no warning.
BEGIN;
SELECT acquire_fenced(1, 2) > 0 AS in_block_token;
COMMIT;

-- In a read-only transaction no token can be drawn: PostgreSQL's own 25006.
BEGIN READ ONLY;
SELECT acquire_fenced(1, 4);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- Running out of lock table space surfaces PostgreSQL's error and hint (53200) ...
BEGIN;
SELECT count(acquire_fenced(7, g)) FROM pg_catalog.generate_series(1, 1000000) g;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- ... and everything works again after ROLLBACK, the aborted grants forgotten.
BEGIN;
SELECT acquire_fenced(7, 1) > 0 AS usable_after_rollback;
SELECT count(*) AS held FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid();
COMMIT;
