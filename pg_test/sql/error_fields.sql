-- Errors that PostgreSQL raises inside fenced_lock's functions (here: privileges) reach the
-- client with their own fields only. The test server runs with RUST_BACKTRACE=1 in its
-- environment: no DETAIL may carry a Rust backtrace, and an error without a DETAIL must not
-- gain an empty one (psql prints every DETAIL it receives, even an empty one).
\set SHOW_CONTEXT never
\set VERBOSITY default
CREATE ROLE fenced_fields_role;
SET ROLE fenced_fields_role;
SELECT register_namespace('fields');
\echo :LAST_ERROR_SQLSTATE
-- fenced_lock's own errors keep their DETAIL and HINT, and nothing more.
SELECT acquire_fenced(NULL::int4, 1);
RESET ROLE;
DROP ROLE fenced_fields_role;
