'use strict'
// The statements both APIs send, the owner ids the library makes, and the lease's clock.
//
// node-postgres sends every parameter as untyped text, so each is cast to the type the function
// takes. No statement has a `name`: node-postgres would prepare it as a named server-side
// statement, which behind a transaction-mode pooler is missing on the next server connection.

const crypto = require('node:crypto')
const os = require('node:os')
const { performance } = require('node:perf_hooks')
const { fromDriver } = require('./errors.cjs')

const KEY = '$1::int4, $2::int4'
const ACQUIRE = {
  exclusive: [`SELECT acquire_fenced(${KEY})`, `SELECT acquire_fenced(${KEY}, $3::interval)`],
  shared: [`SELECT acquire_fenced(${KEY}, shared => true)`,
    `SELECT acquire_fenced(${KEY}, $3::interval, true)`],
}
const TRY_ACQUIRE = {
  exclusive: `SELECT try_acquire_fenced(${KEY})`,
  shared: `SELECT try_acquire_fenced(${KEY}, true)`,
}
const ACQUIRE_LEASE = `SELECT try_acquire_lease(${KEY}, $3::text, $4::interval)`
const ACQUIRE_LEASE_WAIT = `SELECT acquire_lease(${KEY}, $3::text, $4::interval, $5::interval)`
const RENEW_LEASE = `SELECT renew_lease(${KEY}, $3::int8, $4::interval)`
const RELEASE_LEASE = `SELECT release_lease(${KEY}, $3::int8)`
// The text forms: the key is read as the key column's type, whatever the JavaScript value's.
const FENCED_UPDATE =
  'SELECT fenced_update($1::text, $2::text, $3::int8, $4::jsonb, $5::text, $6::text)'
const FENCE_CHECK = 'SELECT fence_check($1::text, $2::int8)'

/** Milliseconds as the interval text the server reads; a RangeError for what no interval is. */
function interval(name, ms, { positive }) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || (positive && ms === 0)) {
    throw new RangeError(`${name} must be a ${positive ? 'positive' : 'non-negative'} number ` +
      `of milliseconds, not ${ms}`)
  }
  return `${ms} milliseconds`
}

function acquireStatement(ns, id, timeoutMs, shared) {
  const forms = ACQUIRE[shared ? 'shared' : 'exclusive']
  if (timeoutMs === undefined) return { text: forms[0], values: [ns, id] }
  return { text: forms[1], values: [ns, id, interval('timeoutMs', timeoutMs, { positive: false })] }
}

function tryAcquireStatement(ns, id, shared) {
  return { text: TRY_ACQUIRE[shared ? 'shared' : 'exclusive'], values: [ns, id] }
}

function acquireLeaseStatement(ns, id, owner, ttlMs, waitMs) {
  const ttl = interval('ttlMs', ttlMs, { positive: true })
  if (waitMs === undefined) return { text: ACQUIRE_LEASE, values: [ns, id, owner, ttl] }
  return {
    text: ACQUIRE_LEASE_WAIT,
    values: [ns, id, owner, ttl, interval('waitMs', waitMs, { positive: false })],
  }
}

function renewLeaseStatement(ns, id, token, ttlMs) {
  return { text: RENEW_LEASE, values: [ns, id, token, interval('ttlMs', ttlMs, { positive: true })] }
}

function releaseLeaseStatement(ns, id, token) {
  return { text: RELEASE_LEASE, values: [ns, id, token] }
}

function fencedUpdateStatement(table, key, token, changes, keyColumn, fenceColumn) {
  return {
    text: FENCED_UPDATE,
    values: [table, String(key), token, JSON.stringify(changes), keyColumn, fenceColumn],
  }
}

function fenceCheckStatement(resource, token) {
  return { text: FENCE_CHECK, values: [resource, token] }
}

/** Sends a statement (unnamed, so never prepared under a name) and returns the first column
 * of its first row, or null; a driver error becomes the typed error. */
async function value(client, statement) {
  let result
  try {
    result = await client.query({ ...statement, rowMode: 'array' })
  } catch (error) {
    throw fromDriver(error)
  }
  return result.rows[0]?.[0] ?? null
}

/** An owner id no other holder has: host, process and a random part (under 256 bytes). */
function newOwner() {
  return `${os.hostname().slice(0, 64)}:${process.pid}:${crypto.randomBytes(8).toString('hex')}`
}

/** A token column's value (int8, which node-postgres returns as a string): null or a bigint. */
function token(value) {
  return value === null || value === undefined ? null : BigInt(value)
}

/** Milliseconds on this process's monotonic clock, never the wall clock. */
function now() {
  return performance.now()
}

/** A lease's timing on the monotonic clock. The server grants the ttl from the moment it runs
 * the call, which is after the call was sent, so the lease is known valid until the send time
 * plus the ttl (less a margin, for the clocks' rates and the time a write takes once the holder
 * has checked). Renewals are due every third of the ttl; one that fails for a passing reason is
 * tried again sooner, while time remains. */
class LeaseClock {
  constructor(ttlMs, marginMs, sentAt) {
    interval('ttlMs', ttlMs, { positive: true })
    this.ttl = ttlMs
    this.margin = marginMs === undefined ? Math.min(ttlMs / 5, 2000) : marginMs
    if (typeof this.margin !== 'number' || !(this.margin >= 0 && this.margin < ttlMs / 3)) {
      throw new RangeError('marginMs must be at least 0 and below a third of the ttl')
    }
    this.retry = Math.min(ttlMs / 10, 1000)
    this.renewed(sentAt)
  }

  renewed(sentAt) {
    this.validUntil = sentAt + this.ttl
    this.nextRenewal = sentAt + this.ttl / 3
  }

  failed(at) {
    this.nextRenewal = at + this.retry
  }

  /** When the lease stops being known valid: no renewal may complete after it. */
  get deadline() {
    return this.validUntil - this.margin
  }

  remaining(at = now()) {
    return this.deadline - at
  }
}

// Why a lease was lost: LeaseLost's reason and the onLost callback's argument.
const LOST_NOT_HELD = 'renew_lease returned NULL: the lease was released or taken over'
const LOST_DEADLINE = 'no renewal completed before the lease\'s validity ended'
const LOST_RELEASED = 'released'

module.exports = {
  acquireStatement, tryAcquireStatement, acquireLeaseStatement, renewLeaseStatement,
  releaseLeaseStatement, fencedUpdateStatement, fenceCheckStatement, value, newOwner, token, now,
  LeaseClock, LOST_NOT_HELD, LOST_DEADLINE, LOST_RELEASED,
}
