-- Claiming queue rows with tokens (README: Claiming queue rows): claim 10 pending jobs with
-- the one-statement SKIP LOCKED claim, each with a fencing token, then complete each with its
-- token, checked by the row (the job goes back to pending, so the queue never drains).
WITH claimed AS (
    UPDATE bench_jobs_fenced SET state = 'running', fence = new_fencing_token(),
           lease_until = clock_timestamp() + interval '5 minutes'
     WHERE id IN (SELECT id FROM bench_jobs_fenced WHERE state = 'pending'
                   ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED)
    RETURNING id, fence)
SELECT array_agg(id) AS ids, array_agg(fence) AS fences FROM claimed
\gset
UPDATE bench_jobs_fenced j SET state = 'pending', lease_until = NULL
  FROM unnest(:ids::int[], :fences::bigint[]) AS c(id, fence)
 WHERE j.id = c.id AND j.fence <= c.fence;
