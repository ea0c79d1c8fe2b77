-- DROP EXTENSION and CREATE EXTENSION in one session: the cached sequence must follow.
\set SHOW_CONTEXT never
BEGIN;
SELECT acquire_fenced(6001, 1) > 0 AS before_drop;
COMMIT;

DROP EXTENSION fenced_lock;
CREATE EXTENSION fenced_lock;
-- The new extension's new sequence starts again at 1.
BEGIN;
SELECT acquire_fenced(6001, 1) AS first_token_of_new_sequence;
SELECT acquire_fenced(6001, 2) AS second_token;
SELECT acquire_fenced(6001, 2) AS second \gset
COMMIT;

-- Also within one transaction, and after a rolled-back re-creation.
BEGIN;
DROP EXTENSION fenced_lock;
CREATE EXTENSION fenced_lock;
SELECT acquire_fenced(6001, 3) AS token_in_same_transaction;
ROLLBACK;
-- The sequence of before the rolled-back re-creation is back: its tokens continue above
-- every number drawn from it (with the shared allocator, above its reserved block).
BEGIN;
SELECT acquire_fenced(6001, 3) > :second AS token_after_rolled_back_recreate_above;
COMMIT;
