-- The queries fenced_lock runs itself (through SPI) turned any failure into a panic in 0.1.0,
-- which clients saw as XX000 with a Rust message. One check per former panic: the failure a
-- caller can cause there reaches it with PostgreSQL's own SQLSTATE.
\set SHOW_CONTEXT never
CREATE ROLE spi_errors_app;
GRANT USAGE ON SCHEMA public TO spi_errors_app;

-- force_release reads fenced_locks with the caller's rights.
REVOKE SELECT ON fenced_locks FROM PUBLIC;
SET ROLE spi_errors_app;
SELECT force_release(8801, 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT SELECT ON fenced_locks TO PUBLIC;

-- register_namespace writes fenced_namespaces with the caller's rights.
SET ROLE spi_errors_app;
SELECT register_namespace('spi_errors');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- fenced_update prepares its UPDATE: a key column without an equality operator fails there.
CREATE TABLE shapes (id point, fence bigint, label text);
SELECT fenced_update_or_false('shapes', '(1,1)'::point, 1, '{"label": "x"}');
\echo :LAST_ERROR_SQLSTATE

DROP TABLE shapes;
REVOKE USAGE ON SCHEMA public FROM spi_errors_app;
DROP ROLE spi_errors_app;
