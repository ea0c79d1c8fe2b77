-- The fence ledger, for resources outside the database.
\set SHOW_CONTEXT never
SELECT fence_check_or_false('s3://bucket/report.csv', 10) AS new_resource;
SELECT fence_check_or_false('s3://bucket/report.csv', 10) AS equal_token;
SELECT fence_check_or_false('s3://bucket/report.csv', 12) AS higher_token;
SELECT fence_check_or_false('s3://bucket/report.csv', 11) AS stale_token;
SELECT resource, token, updated_at <= now() AS stamped FROM fence_ledger;

SELECT fence_check('s3://bucket/report.csv', 12) AS strict_equal;
SELECT fence_check('s3://bucket/report.csv', 11);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check('other', 1) AS strict_new;

SELECT fence_check_or_false(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check_or_false('x', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check('x', NULL);
\echo :LAST_ERROR_SQLSTATE

-- Operators can read the ledger; nobody but the owner writes it except through the functions,
-- which only roles granted EXECUTE may call.
CREATE ROLE fenced_operator;
GRANT EXECUTE ON FUNCTION fence_check_or_false(text, bigint) TO fenced_operator;
SET ROLE fenced_operator;
SELECT resource, token FROM fence_ledger ORDER BY resource;
SELECT fence_check_or_false('other', 2) AS through_function;
UPDATE fence_ledger SET token = 0;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM fence_ledger;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE EXECUTE ON FUNCTION fence_check_or_false(text, bigint) FROM fenced_operator;
DROP ROLE fenced_operator;

-- pg_dump carries the ledger's rows.
SELECT pg_catalog.string_agg(config::regclass::text, ', ' ORDER BY config::regclass::text)
       AS dumped_with_data
  FROM pg_catalog.pg_extension, pg_catalog.unnest(extconfig) AS config
 WHERE extname = 'fenced_lock';
DELETE FROM fence_ledger;
