'use strict'
// fenced-lock for node-postgres: transaction locks, self-renewing leases with a lost signal, a
// leader loop, guarded writes and typed errors, on PostgreSQL's fenced_lock extension.

const errors = require('./errors.cjs')
const statements = require('./statements.cjs')
const { Lease, tryAcquireLease, acquireLease, withLease, LeaderElection } = require('./lease.cjs')

const { NotInTransaction } = errors
const { value } = statements

// node-postgres knows the session's transaction status from the server's last ReadyForQuery:
// 'I' is idle, outside a transaction. (A pg.Pool has none: the server's 25P01 refuses then.)
function requireTransaction(client) {
  if (typeof client.getTransactionStatus === 'function' && client.getTransactionStatus() === 'I') {
    throw new NotInTransaction('a transaction-scoped lock needs a transaction: send BEGIN first ' +
      '(outside one the lock would end with the statement)', { sqlstate: '25P01' })
  }
}

/** Takes the transaction-scoped lock on (ns, id) inside the caller's transaction, waiting (at
 * most `timeoutMs`, then LockBusy), and returns its fencing token. */
async function acquire(client, ns, id, { timeoutMs, shared = false } = {}) {
  requireTransaction(client)
  const token = statements.token(
    await value(client, statements.acquireStatement(ns, id, timeoutMs, shared)))
  if (token === null) throw new Error('acquire_fenced returned NULL: it returns a token or raises')
  return token
}

/** The token, or null at once when another session holds (ns, id). */
async function tryAcquire(client, ns, id, { shared = false } = {}) {
  requireTransaction(client)
  return statements.token(await value(client, statements.tryAcquireStatement(ns, id, shared)))
}

/** Writes `changes` to the row `key` of `table` and its fence to `token`, unless the row accepted
 * a larger token: then StaleToken, and nothing is written. */
async function fencedUpdate(client, table, key, token, changes,
  { keyColumn = 'id', fenceColumn = 'fence' } = {}) {
  await value(client,
    statements.fencedUpdateStatement(table, key, token, changes, keyColumn, fenceColumn))
}

/** Records `token` as the highest `resource` accepted, or throws StaleToken. */
async function fenceCheck(client, resource, token) {
  await value(client, statements.fenceCheckStatement(resource, token))
}

module.exports = {
  acquire, tryAcquire, fencedUpdate, fenceCheck,
  Lease, tryAcquireLease, acquireLease, withLease, LeaderElection,
  newOwner: statements.newOwner,
  LOST_NOT_HELD: statements.LOST_NOT_HELD,
  LOST_DEADLINE: statements.LOST_DEADLINE,
  LOST_RELEASED: statements.LOST_RELEASED,
  FencedLockError: errors.FencedLockError,
  StaleToken: errors.StaleToken,
  LockBusy: errors.LockBusy,
  NotInTransaction: errors.NotInTransaction,
  Retryable: errors.Retryable,
  ReadOnly: errors.ReadOnly,
  ConnectionLost: errors.ConnectionLost,
  LeaseLost: errors.LeaseLost,
  fromDriver: errors.fromDriver,
}
