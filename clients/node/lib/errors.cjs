'use strict'
// Typed errors, one per SQLSTATE a caller acts on differently (the README's error table).

/** The base of this library's errors; for one the server raised, its sqlstate, detail and
 * hint, and node-postgres' error as `cause`. */
class FencedLockError extends Error {
  constructor(message, { sqlstate = null, detail = null, hint = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = new.target.name
    this.sqlstate = sqlstate
    this.detail = detail
    this.hint = hint
  }
}

/** SF001: a write carried a token lower than one the resource already accepted. */
class StaleToken extends FencedLockError {
  constructor(message, options) {
    super(message, options)
    this.offered = null
    this.accepted = null
    this.resource = null
  }
}

/** 55P03, or a lease another owner holds after the wait asked for: nothing was taken. */
class LockBusy extends FencedLockError {}

/** 25P01: a transaction-scoped lock asked for outside a transaction. */
class NotInTransaction extends FencedLockError {}

/** 40001 or 40P01: roll back and retry the transaction. */
class Retryable extends FencedLockError {}

/** 25006: a read-only transaction or a hot standby, where no token can be drawn. */
class ReadOnly extends FencedLockError {}

/** The connection broke: any lock held on it is lost. */
class ConnectionLost extends FencedLockError {}

/** What `Lease.check()` throws, and the lost signal's reason, once the lease is lost. */
class LeaseLost extends FencedLockError {
  constructor(reason) {
    super(`the lease is lost: ${reason}`)
    this.reason = reason
  }
}

const BY_SQLSTATE = {
  SF001: StaleToken,
  '55P03': LockBusy,
  '25P01': NotInTransaction,
  40001: Retryable,
  '40P01': Retryable,
  25006: ReadOnly,
  // admin_shutdown, crash_shutdown, cannot_connect_now: the session is gone.
  '57P01': ConnectionLost,
  '57P02': ConnectionLost,
  '57P03': ConnectionLost,
}

// What Node and node-postgres raise when the socket is gone (no SQLSTATE): system error codes
// and the client's own messages.
const SOCKET_CODES = new Set([
  'ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'ENOTCONN', 'EHOSTUNREACH', 'ENETUNREACH',
  'ENOENT',
])
const CLIENT_GONE = /Connection terminated|connection error|not queryable|Client was closed/i

const STALE = /stale fencing token (NULL|-?\d+) for (.*): token (-?\d+) was already accepted/

// node-postgres' DatabaseError: a five-character SQLSTATE and a severity.
function isServerError(error) {
  return typeof error?.code === 'string' && /^[0-9A-Z]{5}$/.test(error.code) &&
    typeof error.severity === 'string'
}

/** The typed error for a driver's error; the driver's error itself when no type fits. */
function fromDriver(error) {
  if (error instanceof FencedLockError) return error
  const server = isServerError(error)
  let Kind
  if (server) {
    Kind = BY_SQLSTATE[error.code] ?? (error.code.startsWith('08') ? ConnectionLost : undefined)
  } else if (error instanceof Error &&
      (SOCKET_CODES.has(error.code) || CLIENT_GONE.test(error.message))) {
    Kind = ConnectionLost
  }
  if (Kind === undefined) return error
  const typed = new Kind(error.message, {
    sqlstate: server ? error.code : null,
    detail: server ? error.detail ?? null : null,
    hint: server ? error.hint ?? null : null,
    cause: error,
  })
  if (typed instanceof StaleToken) {
    const match = STALE.exec(typed.message)
    if (match) {
      typed.offered = match[1] === 'NULL' ? null : BigInt(match[1])
      // 'resource "name"' for a ledger's resource: the name alone.
      const named = /^resource "(.*)"$/.exec(match[2])
      typed.resource = named ? named[1] : match[2]
      typed.accepted = BigInt(match[3])
    }
  }
  return typed
}

module.exports = {
  FencedLockError, StaleToken, LockBusy, NotInTransaction, Retryable, ReadOnly, ConnectionLost,
  LeaseLost, fromDriver,
}
