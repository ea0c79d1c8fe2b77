-- Any role that may connect can take fenced locks; only the owner can move the sequence.
\set SHOW_CONTEXT never

-- Every function of the extension has a comment.
SELECT p.oid::regprocedure AS function_without_comment
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'fenced_lock')
   AND d.deptype = 'e'
   AND pg_catalog.obj_description(p.oid, 'pg_proc') IS NULL;

CREATE ROLE fenced_lock_app LOGIN;
SET ROLE fenced_lock_app;

BEGIN;
SELECT acquire_fenced(5001, 1) > 0 AS app_acquires;
SELECT try_acquire_fenced(5001, 2) > 0 AS app_tries;
SELECT acquire_fenced(5001, 3, '1s') > 0 AS app_acquires_with_timeout;
COMMIT;

-- The sequence cannot be moved, read or advanced by an ordinary role.
SELECT pg_catalog.setval('fencing_token_seq', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT pg_catalog.nextval('fencing_token_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT last_value FROM fencing_token_seq;
\echo :LAST_ERROR_SQLSTATE
ALTER SEQUENCE fencing_token_seq RESTART WITH 1;
\echo :LAST_ERROR_SQLSTATE
ALTER SEQUENCE fencing_token_seq CYCLE;
\echo :LAST_ERROR_SQLSTATE
DROP SEQUENCE fencing_token_seq;
\echo :LAST_ERROR_SQLSTATE

RESET ROLE;
DROP ROLE fenced_lock_app;
