-- enforce_fence: one CREATE TRIGGER protects an existing table from stale writers, whatever
-- client or statement sends the UPDATE.
\set SHOW_CONTEXT never
CREATE TABLE inventory (sku text PRIMARY KEY, stock int, fence bigint);
INSERT INTO inventory VALUES ('apple', 10, NULL), ('pear', 5, 7);
CREATE TRIGGER inventory_fence BEFORE UPDATE ON inventory
    FOR EACH ROW EXECUTE FUNCTION enforce_fence('fence');

-- Raising the fence, keeping it, or setting it for the first time: allowed.
UPDATE inventory SET stock = 9, fence = 3 WHERE sku = 'apple';
UPDATE inventory SET stock = 8, fence = 3 WHERE sku = 'apple';
UPDATE inventory SET stock = 7 WHERE sku = 'apple';
UPDATE inventory SET stock = 4, fence = 8 WHERE sku = 'pear';
-- Lowering it: refused with SF001, whatever the statement.
UPDATE inventory SET stock = 0, fence = 2 WHERE sku = 'apple';
\echo :LAST_ERROR_SQLSTATE
UPDATE inventory SET stock = 0, fence = fence - 1;
\echo :LAST_ERROR_SQLSTATE
-- Setting it to NULL once set: refused too.
UPDATE inventory SET fence = NULL WHERE sku = 'pear';
\echo :LAST_ERROR_SQLSTATE
-- fenced_update on the same table: the stale write is a false, not an error.
SELECT fenced_update_or_false('inventory', 'apple'::text, 2, '{"stock": 0}', 'sku');
SELECT * FROM inventory ORDER BY sku;

-- The default column is "fence"; a table may have several fence columns.
CREATE TABLE tasks (id int PRIMARY KEY, epoch bigint NOT NULL, fence bigint NOT NULL);
INSERT INTO tasks VALUES (1, 5, 5);
CREATE TRIGGER tasks_epoch BEFORE UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION enforce_fence('epoch');
CREATE TRIGGER tasks_fence BEFORE UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION enforce_fence();
UPDATE tasks SET epoch = 4;
\echo :LAST_ERROR_SQLSTATE
UPDATE tasks SET fence = 4;
\echo :LAST_ERROR_SQLSTATE
UPDATE tasks SET epoch = 6, fence = 6;
SELECT * FROM tasks;

-- Fence columns are bigint, as tokens are: a smaller integer column is refused (42804) with the
-- ALTER TABLE that fixes it, before it could overflow (each failover skips 10^9 tokens).
CREATE TABLE small_fences (id int PRIMARY KEY, fence int NOT NULL, epoch smallint NOT NULL);
INSERT INTO small_fences VALUES (1, 5, 5);
CREATE TRIGGER small_fence BEFORE UPDATE ON small_fences
    FOR EACH ROW EXECUTE FUNCTION enforce_fence();
UPDATE small_fences SET fence = 6;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER small_fence ON small_fences;
CREATE TRIGGER small_epoch BEFORE UPDATE ON small_fences
    FOR EACH ROW EXECUTE FUNCTION enforce_fence('epoch');
UPDATE small_fences SET epoch = 6;
\echo :LAST_ERROR_SQLSTATE
DROP TABLE small_fences;

-- Bad set-up is reported clearly at first use.
CREATE TABLE misuse (id int PRIMARY KEY, fence text, other int);
INSERT INTO misuse VALUES (1, 'x', 1);
CREATE TRIGGER misuse_text BEFORE UPDATE ON misuse
    FOR EACH ROW EXECUTE FUNCTION enforce_fence('fence');
UPDATE misuse SET other = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER misuse_text ON misuse;
CREATE TRIGGER misuse_missing BEFORE UPDATE ON misuse
    FOR EACH ROW EXECUTE FUNCTION enforce_fence('nope');
UPDATE misuse SET other = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER misuse_missing ON misuse;
CREATE TRIGGER misuse_after AFTER UPDATE ON misuse
    FOR EACH ROW EXECUTE FUNCTION enforce_fence('other');
UPDATE misuse SET other = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER misuse_after ON misuse;
CREATE TRIGGER misuse_insert BEFORE INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION enforce_fence('other');
INSERT INTO misuse VALUES (2, 'y', 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER misuse_insert ON misuse;
CREATE TRIGGER misuse_statement BEFORE UPDATE ON misuse
    FOR EACH STATEMENT EXECUTE FUNCTION enforce_fence('other');
UPDATE misuse SET other = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER misuse_statement ON misuse;
CREATE TRIGGER misuse_args BEFORE UPDATE ON misuse
    FOR EACH ROW EXECUTE FUNCTION enforce_fence('other', 'fence');
UPDATE misuse SET other = 2;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER misuse_args ON misuse;
SELECT enforce_fence();
\echo :LAST_ERROR_SQLSTATE

DROP TABLE inventory, tasks, misuse;
