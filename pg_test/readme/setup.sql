-- What the README's examples take for granted: the tables they write, the psql variables they
-- use and the role they grant to. Run before the examples, in a database without fenced_lock
-- (the first example creates it).
\set account_id 7
\set job_id 3
\set tenant_id 11
\set from_id 7
\set to_id 8
CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance numeric, fence bigint);
INSERT INTO accounts VALUES (7, 'alice', 100, NULL), (8, 'bob', 50, NULL);
CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL DEFAULT 'pending',
                   lease_until timestamptz, fence bigint);
INSERT INTO jobs (id) SELECT g FROM generate_series(40, 49) g;
INSERT INTO jobs (id, state) VALUES (1, 'leader-owned');
CREATE TABLE inventory (sku text PRIMARY KEY, stock int);
INSERT INTO inventory VALUES ('apple', 10);
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN CREATE ROLE app; END IF;
END $$;
