// The ES module entry: the CommonJS implementation's exports, by name (one implementation, so
// `instanceof` holds whichever way a program loads it).
import lib from './index.cjs'

export const {
  acquire, tryAcquire, fencedUpdate, fenceCheck,
  Lease, tryAcquireLease, acquireLease, withLease, LeaderElection,
  newOwner, LOST_NOT_HELD, LOST_DEADLINE, LOST_RELEASED,
  FencedLockError, StaleToken, LockBusy, NotInTransaction, Retryable, ReadOnly, ConnectionLost,
  LeaseLost, fromDriver,
} = lib
export default lib
