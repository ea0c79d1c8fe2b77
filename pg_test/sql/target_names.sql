-- fenced_update's target given as a name (text, as an untyped driver parameter arrives) is
-- resolved as name::regclass would be, on every call: a backend remembers resolved names, and
-- each case below changes what a name means between two calls of one prepared statement.
-- Every write goes where regclass input would send it at that moment, never to the table the
-- name meant before.
CREATE SCHEMA tn_a;
CREATE SCHEMA tn_b;
CREATE TABLE tn_a.t (id int PRIMARY KEY, fence bigint, v text);
CREATE TABLE tn_b.t (id int PRIMARY KEY, fence bigint, v text);
INSERT INTO tn_a.t VALUES (1, 0, 'a');
INSERT INTO tn_b.t VALUES (1, 0, 'b');
PREPARE by_name(text, int, bigint, jsonb) AS SELECT fenced_update_or_false($1, $2, $3, $4);
-- Parsed anew each time (a view would keep the tables it was created with).
\set show_rows 'SELECT ''tn_a.t'' AS tab, v, fence FROM tn_a.t UNION ALL SELECT ''tn_b.t'', v, fence FROM tn_b.t ORDER BY 1;'

-- The search path decides.
SET search_path = tn_a, public;
EXECUTE by_name('t', 1, 1, '{"v": "a: search_path tn_a"}');
EXECUTE by_name('t', 1, 2, '{"v": "a: again, remembered"}');
SET search_path = tn_b, public;
EXECUTE by_name('t', 1, 3, '{"v": "b: search_path tn_b"}');
:show_rows

-- A rename, and a newcomer under the old name.
ALTER TABLE tn_b.t RENAME TO t_old;
CREATE TABLE tn_b.t (id int PRIMARY KEY, fence bigint, v text);
INSERT INTO tn_b.t VALUES (1, 0, 'b newcomer');
EXECUTE by_name('t', 1, 4, '{"v": "b: the newcomer"}');
SELECT v, fence FROM tn_b.t_old;
:show_rows

-- A table created in a schema earlier in the path shadows the one the name meant.
SET search_path = tn_a, tn_b, public;
DROP TABLE tn_a.t;
EXECUTE by_name('t', 1, 5, '{"v": "b: tn_a.t is gone"}');
CREATE TABLE tn_a.t (id int PRIMARY KEY, fence bigint, v text);
INSERT INTO tn_a.t VALUES (1, 0, 'a again');
EXECUTE by_name('t', 1, 6, '{"v": "a: created in front"}');
:show_rows

-- A temporary table comes first in the path.
CREATE TEMP TABLE t (id int PRIMARY KEY, fence bigint, v text);
INSERT INTO t VALUES (1, 0, 'temp');
EXECUTE by_name('t', 1, 7, '{"v": "temp: shadows both"}');
SELECT v, fence FROM pg_temp.t;
DROP TABLE pg_temp.t;
EXECUTE by_name('t', 1, 8, '{"v": "a: temp dropped"}');

-- A renamed schema.
ALTER SCHEMA tn_a RENAME TO tn_a_renamed;
EXECUTE by_name('t', 1, 9, '{"v": "b: tn_a renamed away"}');
ALTER SCHEMA tn_a_renamed RENAME TO tn_a;
EXECUTE by_name('t', 1, 10, '{"v": "a: tn_a back"}');
:show_rows

-- "$user" follows the role.
CREATE ROLE tn_user;
CREATE SCHEMA tn_user AUTHORIZATION tn_user;
CREATE TABLE tn_user.t (id int PRIMARY KEY, fence bigint, v text);
ALTER TABLE tn_user.t OWNER TO tn_user;
INSERT INTO tn_user.t VALUES (1, 0, 'user');
GRANT USAGE ON SCHEMA tn_a, tn_b TO tn_user;
GRANT SELECT, UPDATE ON tn_a.t, tn_b.t TO tn_user;
SET search_path = "$user", tn_a, public;
EXECUTE by_name('t', 1, 11, '{"v": "a: as postgres"}');
SET ROLE tn_user;
EXECUTE by_name('t', 1, 12, '{"v": "user: own schema"}');
RESET ROLE;
EXECUTE by_name('t', 1, 13, '{"v": "a: postgres again"}');
SELECT v, fence FROM tn_user.t;

-- A name that resolves nowhere is 42P01, as regclass input says.
SET search_path = public;
\set VERBOSITY sqlstate
EXECUTE by_name('t', 1, 14, '{"v": "nowhere"}');
\set VERBOSITY default
EXECUTE by_name('tn_a.t', 1, 14, '{"v": "a: qualified"}');
:show_rows

DEALLOCATE by_name;
DROP SCHEMA tn_a, tn_b, tn_user CASCADE;
DROP ROLE tn_user;
