'use strict'
// Leases: a connection of their own, renewed by a timer every third of the ttl, a watchdog
// timer at the end of the validity, and a lost signal; the leader loop on top.

const { ConnectionLost, LeaseLost, LockBusy, Retryable, fromDriver } = require('./errors.cjs')
const statements = require('./statements.cjs')
const { LeaseClock, now, value } = statements

/** Opens a lease's connection: a node-postgres Client (the peer dependency). */
async function defaultConnect(config) {
  const { Client } = require('pg')
  const client = new Client(config)
  await client.connect()
  return client
}

/** [true, value] once `promise` settles within `ms`, [false] when it has not; rejections pass. */
async function settledWithin(promise, ms) {
  let timer
  const late = new Promise((resolve) => { timer = setTimeout(() => resolve([false]), ms) })
  try {
    return await Promise.race([promise.then((result) => [true, result]), late])
  } finally {
    clearTimeout(timer)
  }
}

/** Ends a connection; one that does not end within `ms` (a dead link) has its socket destroyed. */
async function close(client, ms) {
  const [ended] = await settledWithin(client.end().catch(() => {}), ms)
  if (!ended) client.connection?.stream?.destroy()
}

function noop() {}

/** A lease held for `owner`, renewed in the background every third of its ttl on a connection of
 * its own, until `release()` (or the end of an `await using` block).
 *
 * `signal` (an AbortSignal) is aborted when the lease ends, its reason a LeaseLost: released, or
 * lost because a renewal found it no longer held, failed, or could not complete before its
 * validity ended (less the margin). `onLost(reason)` is called, before the signal is aborted,
 * only for a loss. A lease is never taken again behind the holder's back: once lost, it stays
 * lost. */
class Lease {
  #client
  #clock
  #onLost
  #controller = new AbortController()
  #renewal = null
  #renewTimer = null
  #watchdog = null
  #broken = false

  constructor(client, ns, id, owner, token, clock, onLost) {
    this.ns = ns
    this.id = id
    this.owner = owner
    this.token = token
    this.signal = this.#controller.signal
    this.lostReason = null
    this.#client = client
    this.#clock = clock
    this.#onLost = onLost
    // An idle connection that breaks emits 'error' (unhandled, it would end the process).
    client.on('error', (error) => {
      this.#broken = true
      this.#lose(`the connection was lost: ${error.message}`)
    })
    this.#scheduleRenewal()
    this.#armWatchdog()
  }

  get lost() {
    return this.lostReason !== null
  }

  /** Milliseconds the lease is still known to be valid (0 once lost). */
  get validForMs() {
    return this.lost ? 0 : Math.max(0, this.#clock.remaining())
  }

  /** Throws LeaseLost unless the lease is still known to be valid: call it before each step of
   * the work (the clock is read here, so a holder paused past its validity finds out at once,
   * before any timer runs). */
  check() {
    if (!this.lost && this.#clock.remaining() <= 0) this.#lose(statements.LOST_DEADLINE)
    if (this.lost) throw new LeaseLost(this.lostReason)
  }

  #lose(reason, notify = true) {
    if (this.lostReason !== null) return
    this.lostReason = reason
    clearTimeout(this.#renewTimer)
    clearTimeout(this.#watchdog)
    // The callback first: whoever the signal wakes finds it has run.
    if (notify && this.#onLost) {
      try {
        this.#onLost(reason)
      } catch {
        // The callback's failure is the caller's; the lease is lost either way.
      }
    }
    this.#controller.abort(new LeaseLost(reason))
  }

  #scheduleRenewal() {
    const delay = Math.max(0, this.#clock.nextRenewal - now())
    this.#renewTimer = setTimeout(() => { this.#renewal = this.#renew() }, delay)
  }

  // A renewal hung on a dead link never returns in time: this timer, not the renewal, says so
  // when the validity ends.
  #armWatchdog() {
    clearTimeout(this.#watchdog)
    this.#watchdog = setTimeout(() => {
      if (this.#clock.remaining() <= 0) this.#lose(statements.LOST_DEADLINE)
      else this.#armWatchdog()
    }, Math.max(0, this.#clock.remaining()))
  }

  async #renew() {
    const sentAt = now()
    // After a pause (SIGSTOP, a long GC) the due renewal runs first: the lease is past its
    // validity, so it is lost, and nothing is sent.
    if (this.#clock.remaining(sentAt) <= 0) return this.#lose(statements.LOST_DEADLINE)
    let expires
    try {
      expires = await value(this.#client,
        statements.renewLeaseStatement(this.ns, this.id, this.token, this.#clock.ttl))
    } catch (error) {
      if (this.lost) return
      if (error instanceof LockBusy || error instanceof Retryable) {
        // Another transaction writing the row for a moment: try again while time remains.
        this.#clock.failed(now())
        return this.#scheduleRenewal()
      }
      if (error instanceof ConnectionLost) {
        this.#broken = true
        return this.#lose(`the connection was lost: ${error.message}`)
      }
      return this.#lose(`renewal failed: ${error.message}`)
    }
    if (this.lost) return
    if (expires === null) return this.#lose(statements.LOST_NOT_HELD)
    this.#clock.renewed(sentAt)
    this.#armWatchdog()
    this.#scheduleRenewal()
  }

  /** Ends the lease: true when the server released it (it was still this holder's). The signal
   * is aborted (reason "released", no callback). After a loss it tries too, since a lease only
   * known to be past its validity may still be this holder's. */
  async release() {
    const wasLost = this.lost
    this.#lose(statements.LOST_RELEASED, false)
    // A renewal hung on a dead link holds the connection: wait for it no longer than this.
    const bound = Math.max(1000, this.#clock.ttl / 3)
    if (this.#broken) {
      this.#client.connection?.stream?.destroy()
      return false
    }
    try {
      if (this.#renewal !== null) {
        const [settled] = await settledWithin(this.#renewal, bound)
        if (!settled) throw new ConnectionLost('a renewal still hangs on the connection')
      }
      const [answered, released] = await settledWithin(value(this.#client,
        statements.releaseLeaseStatement(this.ns, this.id, this.token)), bound)
      if (!answered) throw new ConnectionLost(`release_lease had no answer within ${bound} ms`)
      return released === true
    } catch (error) {
      if (wasLost) return false
      throw fromDriver(error)
    } finally {
      await close(this.#client, bound)
    }
  }

  /** `await using lease = await acquireLease(...)`: released at the end of the block. A lost
   * connection is not thrown there: the lease expires by itself. */
  async [Symbol.asyncDispose]() {
    try {
      await this.release()
    } catch (error) {
      if (!(error instanceof ConnectionLost)) throw error
    }
  }
}

/** The lease on (ns, id), or null when another owner holds it (after waiting up to `waitMs` for
 * it to be released or expire). */
async function tryAcquireLease(config, ns, id, options) {
  const { ttlMs, waitMs, marginMs, onLost, connect = defaultConnect } = options ?? {}
  const owner = options?.owner ?? statements.newOwner()
  const clock = new LeaseClock(ttlMs, marginMs, now())
  const statement = statements.acquireLeaseStatement(ns, id, owner, ttlMs, waitMs)
  let client
  try {
    client = await connect(config)
  } catch (error) {
    throw fromDriver(error)
  }
  client.on('error', noop) // until the lease listens
  const sentAt = now()
  let token
  try {
    token = statements.token(await value(client, statement))
  } catch (error) {
    await close(client, 1000)
    // The wait ran out (55P03): busy, as without a wait.
    if (error instanceof LockBusy) return null
    throw error
  }
  if (token === null) {
    await close(client, 1000)
    return null
  }
  clock.renewed(sentAt)
  const lease = new Lease(client, ns, id, owner, token, clock, onLost)
  client.off('error', noop)
  return lease
}

/** As tryAcquireLease, but LockBusy instead of null. */
async function acquireLease(config, ns, id, options) {
  const lease = await tryAcquireLease(config, ns, id, options)
  if (lease === null) throw new LockBusy(`the lease on (${ns}, ${id}) is held by another owner`)
  return lease
}

/** Runs `work(lease)` holding the lease, and releases it however the work ends. */
async function withLease(config, ns, id, options, work) {
  const lease = await acquireLease(config, ns, id, options)
  try {
    return await work(lease)
  } finally {
    await lease[Symbol.asyncDispose]()
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    signal?.addEventListener('abort', done, { once: true })
  })
}

/** client-go's leader election on a lease: `run()` campaigns for (ns, id) until `signal` is
 * aborted; each time it wins, `onElected(term, signal)` runs (the term is the lease's token; the
 * signal is aborted when the term ends, and the function should return then), then `onStopped()`;
 * then it campaigns again. */
class LeaderElection {
  constructor(config, ns, id, options = {}) {
    this.config = config
    this.ns = ns
    this.id = id
    this.ttlMs = options.ttlMs ?? 15000
    this.owner = options.owner ?? statements.newOwner()
    this.retryPeriodMs = options.retryPeriodMs ?? this.ttlMs / 2
    this.marginMs = options.marginMs
    this.connect = options.connect
  }

  async run({ onElected, onStopped, signal }) {
    while (!signal?.aborted) {
      let lease
      try {
        lease = await tryAcquireLease(this.config, this.ns, this.id, {
          ttlMs: this.ttlMs, owner: this.owner, waitMs: this.retryPeriodMs,
          marginMs: this.marginMs, connect: this.connect,
        })
      } catch (error) {
        if (!(error instanceof ConnectionLost)) throw error
        await sleep(this.retryPeriodMs, signal)
        continue
      }
      if (lease === null) continue
      await this.#lead(lease, onElected, signal)
      await onStopped?.()
    }
  }

  async #lead(lease, onElected, stop) {
    const work = Promise.resolve().then(() => onElected(lease.token, lease.signal))
    // The term ends when the work returns, the lease is lost or the caller stops.
    let end
    const ended = new Promise((resolve) => { end = resolve })
    lease.signal.addEventListener('abort', end, { once: true })
    stop?.addEventListener('abort', end, { once: true })
    if (stop?.aborted) end()
    work.then(end, end)
    await ended
    stop?.removeEventListener('abort', end)
    try {
      await lease.release()
    } catch (error) {
      if (!(error instanceof ConnectionLost)) throw error
    }
    await work
  }
}

module.exports = { Lease, tryAcquireLease, acquireLease, withLease, LeaderElection }
