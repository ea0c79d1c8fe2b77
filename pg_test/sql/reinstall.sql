-- DROP EXTENSION and CREATE EXTENSION in one session: the cached sequence must follow.
\set SHOW_CONTEXT never
BEGIN;
SELECT acquire_fenced(6001, 1) AS before_drop \gset
COMMIT;

SELECT ((date_part('epoch', clock_timestamp()) - 946684800) * 1000000)::bigint
    AS clock_before_create \gset
DROP EXTENSION fenced_lock;
CREATE EXTENSION fenced_lock;
-- The new extension's new sequence starts at the clock (microseconds since 2000-01-01), above
-- every token the dropped one issued: resources that kept its tokens accept the new holders.
BEGIN;
SELECT acquire_fenced(6001, 1) AS first_token_of_new_sequence \gset
SELECT :first_token_of_new_sequence > :before_drop AS above_the_dropped_extensions_tokens,
       :first_token_of_new_sequence > :clock_before_create AS above_the_clock,
       :first_token_of_new_sequence < 2 ^ 53 AS exact_in_javascript;
SELECT acquire_fenced(6001, 2) > :first_token_of_new_sequence AS second_token_rises;
SELECT acquire_fenced(6001, 2) AS second \gset
COMMIT;

-- Also within one transaction, and after a rolled-back re-creation.
BEGIN;
DROP EXTENSION fenced_lock;
CREATE EXTENSION fenced_lock;
SELECT acquire_fenced(6001, 3) > :clock_before_create AS token_in_same_transaction_above_clock;
ROLLBACK;
-- The sequence of before the rolled-back re-creation is back: its tokens continue above
-- every number drawn from it (with the shared allocator, above its reserved block).
BEGIN;
SELECT acquire_fenced(6001, 3) > :second AS token_after_rolled_back_recreate_above;
COMMIT;
