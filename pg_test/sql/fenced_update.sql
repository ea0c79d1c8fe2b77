-- fenced_update: the conditional write that refuses stale tokens.
\set SHOW_CONTEXT never
CREATE TABLE accounts (
    id int PRIMARY KEY,
    owner text,
    balance numeric(10, 2),
    active boolean,
    tags text[],
    meta jsonb,
    seen timestamptz,
    fence bigint NOT NULL DEFAULT 0
);
INSERT INTO accounts (id, owner, balance) VALUES (1, 'alice', 10), (2, 'bob', 20);

-- Written: values typed by their columns, the fence set to the token.
SELECT fenced_update_or_false('accounts', 1, 5, '{"owner": "carol", "balance": 12.5, "active": true,
    "tags": ["a", "b"], "meta": {"k": [1, 2]}, "seen": "2026-01-02 03:04:05+00"}');
SELECT id, owner, balance, active, tags, meta, seen AT TIME ZONE 'UTC' AS seen_utc, fence
  FROM accounts WHERE id = 1;
-- The same token again: the same holder writing again, accepted.
SELECT fenced_update_or_false('accounts', 1, 5, '{"owner": "carol2"}');
-- A higher token: accepted. A lower one: refused (false), the row untouched.
SELECT fenced_update_or_false('accounts', 1, 9, '{"owner": "dave"}');
SELECT fenced_update_or_false('accounts', 1, 7, '{"owner": "stale"}') AS stale_write;
SELECT owner, fence FROM accounts WHERE id = 1;
-- No changes: only the fence moves. NULL values write NULL.
SELECT fenced_update_or_false('accounts', 2, 3);
SELECT fenced_update_or_false('accounts', 2, 4, '{"owner": null}');
SELECT owner, fence FROM accounts WHERE id = 2;
-- A text key and custom column names.
CREATE TABLE jobs (name text PRIMARY KEY, state text, epoch bigint NOT NULL DEFAULT 0);
INSERT INTO jobs VALUES ('nightly', 'idle');
SELECT fenced_update_or_false('jobs', 'nightly'::text, 2, '{"state": "running"}', 'name', 'epoch');
SELECT fenced_update_or_false('jobs', 'nightly'::text, 1, '{"state": "stale"}', key_column => 'name',
                     fence_column => 'epoch') AS stale_write;
SELECT * FROM jobs;

-- Errors, each with its SQLSTATE.
SELECT fenced_update_or_false('accounts', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false(NULL, 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', NULL::int, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '[1, 2]');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '"text"');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '{"nope": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '{"id": 3}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '{"fence": 99}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update('accounts', 1, 10, '{}', fence_column => 'missing');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update('accounts', 1, 10, '{}', fence_column => 'owner');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update('accounts', 1, 10, '{}', key_column => 'missing');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '{"balance": "lots"}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '{"active": "maybe"}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '{"balance": 123456789012}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 1, 10, '{"tags": [[1], 2]}');
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update_or_false('accounts', 42, 10);
\echo :LAST_ERROR_SQLSTATE
CREATE VIEW accounts_view AS SELECT * FROM accounts;
SELECT fenced_update_or_false('accounts_view', 1, 10);
\echo :LAST_ERROR_SQLSTATE
-- Fence columns are bigint, as tokens are: smallint and integer ones are refused (42804) with
-- the ALTER TABLE that fixes them, before a token could overflow them.
CREATE TABLE small_fences (id int PRIMARY KEY, fence int NOT NULL DEFAULT 0,
                           epoch smallint NOT NULL DEFAULT 0);
INSERT INTO small_fences VALUES (1);
SELECT fenced_update_or_false('small_fences', 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT fenced_update('small_fences', 1, 1, '{}', fence_column => 'epoch');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM small_fences;
DROP TABLE small_fences;
-- Nothing changed by the failed calls.
SELECT id, owner, balance, fence FROM accounts ORDER BY id;

-- Hostile identifiers and values: quoted, never spliced.
CREATE TABLE "we""ird; table" (
    "the key" int PRIMARY KEY,
    "a""; DROP TABLE accounts; --" text,
    "ünïcødé ✓" text,
    "fence col" bigint NOT NULL DEFAULT 0
);
INSERT INTO "we""ird; table" VALUES (1, NULL, NULL);
SELECT fenced_update_or_false('"we""ird; table"', 1, 1, '{"a\"; DROP TABLE accounts; --": "x''); DROP TABLE accounts; --", "ünïcødé ✓": "back\\slash \"quote\" ; semi"}', 'the key', 'fence col');
SELECT * FROM "we""ird; table";
SELECT count(*) AS accounts_still_there FROM accounts;
-- A column name of 63 bytes, the longest PostgreSQL keeps.
ALTER TABLE accounts ADD COLUMN "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" int;
SELECT fenced_update_or_false('accounts', 2, 20, '{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": 7}');

-- The statement is prepared once per column set and follows the table's changes.
SELECT fenced_update_or_false('accounts', 2, 21, '{"owner": "erin"}');
ALTER TABLE accounts RENAME COLUMN owner TO holder;
SELECT fenced_update_or_false('accounts', 2, 22, '{"holder": "frank"}');
SELECT fenced_update_or_false('accounts', 2, 23, '{"owner": "gone"}');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE accounts RENAME TO ledger_accounts;
SELECT fenced_update_or_false('ledger_accounts', 2, 24, '{"holder": "grace"}');
SELECT holder, fence FROM ledger_accounts WHERE id = 2;
DROP TABLE jobs;
CREATE TABLE jobs (name text PRIMARY KEY, state text, epoch bigint NOT NULL DEFAULT 0);
INSERT INTO jobs VALUES ('nightly', 'idle');
SELECT fenced_update_or_false('jobs', 'nightly'::text, 2, '{"state": "again"}', 'name', 'epoch');

-- Column privileges and row-level security apply: it runs with the caller's rights.
CREATE ROLE fenced_writer;
GRANT SELECT, UPDATE (holder, fence) ON ledger_accounts TO fenced_writer;
SET ROLE fenced_writer;
SELECT fenced_update_or_false('ledger_accounts', 2, 30, '{"holder": "henry"}');
SELECT fenced_update_or_false('ledger_accounts', 2, 31, '{"balance": 1}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
ALTER TABLE ledger_accounts ENABLE ROW LEVEL SECURITY;
CREATE POLICY only_row_two ON ledger_accounts USING (id = 2);
SET ROLE fenced_writer;
SELECT fenced_update_or_false('ledger_accounts', 2, 32, '{"holder": "ivy"}') AS visible_row;
SELECT fenced_update_or_false('ledger_accounts', 1, 32, '{"holder": "ivy"}') AS hidden_row;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT id, holder, fence FROM ledger_accounts ORDER BY id;
DROP TABLE ledger_accounts, jobs, "we""ird; table" CASCADE;
DROP ROLE fenced_writer;
