-- The same claim without tokens (fence = fence + 1, what a queue without fencing does): claim 10
-- pending jobs with the one-statement SKIP LOCKED claim, then complete each with its fence,
-- checked by the row (the job goes back to pending, so the queue never drains).
WITH claimed AS (
    UPDATE bench_jobs_raw SET state = 'running', fence = fence + 1,
           lease_until = clock_timestamp() + interval '5 minutes'
     WHERE id IN (SELECT id FROM bench_jobs_raw WHERE state = 'pending'
                   ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED)
    RETURNING id, fence)
SELECT array_agg(id) AS ids, array_agg(fence) AS fences FROM claimed
\gset
UPDATE bench_jobs_raw j SET state = 'pending', lease_until = NULL
  FROM unnest(:ids::int[], :fences::bigint[]) AS c(id, fence)
 WHERE j.id = c.id AND j.fence <= c.fence;
