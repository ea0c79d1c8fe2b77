-- A fenced semaphore of 4 permits on one hot key: any free slot and a fresh token, waiting in
-- line when all 4 are held; released at commit.
BEGIN;
SELECT slot, token FROM acquire_permit(1001, 7, 4);
COMMIT;
