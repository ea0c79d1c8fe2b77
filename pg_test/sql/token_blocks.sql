-- The shared allocator's blocks (the server is preloaded; fenced_lock.token_block is 10000).
-- The backend that takes a block's middle number reserves the next block ahead, so that no
-- backend waits for a reservation's WAL flush when a block is used up; tokens run on from one
-- block into the next without a gap, and the owner's setval retires both blocks.
-- After advance_fencing_tokens, the next token reserves a block from the sequence's new state.
SELECT advance_fencing_tokens(last_value + 1) AS base FROM fencing_token_seq \gset
SELECT new_fencing_token() = :base + 1 AS first_of_a_block;
SELECT last_value = :base + 10000 AS one_block_reserved FROM fencing_token_seq;
-- Up to the number before the middle: nothing reserved ahead yet.
SELECT max(new_fencing_token()) = :base + 5000 AS before_the_middle
FROM generate_series(2, 5000);
SELECT last_value = :base + 10000 AS still_one_block FROM fencing_token_seq;
-- The middle number reserves the next block.
SELECT new_fencing_token() = :base + 5001 AS the_middle;
SELECT last_value = :base + 20000 AS next_block_reserved FROM fencing_token_seq;
-- The rest of the block, then the next one: every number once, in order.
SELECT count(*) = 6000 AND bool_and(token = :base + 5001 + n) AS consecutive
FROM (SELECT n, new_fencing_token() AS token FROM generate_series(1, 6000) n) AS tokens;
SELECT last_value = :base + 20000 AS taken_over_without_a_reservation FROM fencing_token_seq;
-- The second block's middle reserves the third.
SELECT max(new_fencing_token()) = :base + 15001 AS second_middle
FROM generate_series(1, 4000);
SELECT last_value = :base + 30000 AS third_block_reserved FROM fencing_token_seq;
-- The owner's setval, below the end of the block reserved ahead: the current block and that
-- one are both retired, and the next token comes from the sequence's new state.
SELECT setval('fencing_token_seq', :base + 25000) = :base + 25000 AS owner_setval;
SELECT new_fencing_token() = :base + 25001 AS from_the_new_state;
SELECT last_value = :base + 35000 AS a_new_block FROM fencing_token_seq;
SELECT count(*) = 10000 AND bool_and(token = :base + 25001 + n) AS consecutive_again
FROM (SELECT n, new_fencing_token() AS token FROM generate_series(1, 10000) n) AS tokens;
