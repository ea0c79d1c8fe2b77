// The conformance scenarios (clients/conformance.md), directly and through PgBouncer.
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  LOST_NOT_HELD, LeaderElection, LeaseLost, LockBusy, NotInTransaction, StaleToken, acquire,
  acquireLease, fenceCheck, fencedUpdate, fromDriver, tryAcquire, tryAcquireLease, withLease,
} from 'fenced-lock'
import {
  DIRECT, ROUTES, abortedWithin, body, connect, docId, key, leaseRow, waitUntil, withClient,
} from './helpers.mjs'

const require = createRequire(import.meta.url)

test('installed from the npm tarball', () => {
  assert.match(require.resolve('fenced-lock'), /node_modules\/fenced-lock\/lib\/index\.cjs$/)
  // One implementation behind both entries: the ES module's classes are the CommonJS ones.
  assert.equal(require('fenced-lock').StaleToken, StaleToken)
})

async function inTransaction(client, work) {
  await client.query('BEGIN')
  try {
    const result = await work()
    await client.query('COMMIT')
    return result
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  }
}

for (const [route, where] of Object.entries(ROUTES)) {
  describe(route, () => {
    test('transaction_lock_take', async () => {
      const [ns, id] = key()
      const a = await connect(where)
      const b = await connect(where)
      try {
        const token = await inTransaction(a, async () => {
          const token = await acquire(a, ns, id)
          assert.equal(typeof token, 'bigint')
          assert.ok(token > 0n)
          const { rows } = await a.query('SELECT current_fence($1::int4, $2::int4) AS f', [ns, id])
          assert.equal(BigInt(rows[0].f), token)
          await inTransaction(b, async () => assert.equal(await tryAcquire(b, ns, id), null))
          return token
        })
        const later = await inTransaction(b, () => acquire(b, ns, id, { timeoutMs: 1000 }))
        assert.ok(later > token)
      } finally {
        await a.end()
        await b.end()
      }
    })

    test('transaction_lock_outside_a_transaction', async () => {
      const [ns, id] = key()
      await withClient(where, async (client) => {
        await assert.rejects(acquire(client, ns, id), NotInTransaction)
        await assert.rejects(tryAcquire(client, ns, id), NotInTransaction)
        // The server's own refusal maps to the same type.
        const refused = await client.query('SELECT acquire_fenced($1::int4, $2::int4)', [ns, id])
          .then(() => null, fromDriver)
        assert.ok(refused instanceof NotInTransaction)
        assert.equal(refused.sqlstate, '25P01')
      })
    })

    test('busy', async () => {
      const [ns, id] = key()
      const a = await connect(where)
      const b = await connect(where)
      try {
        await inTransaction(a, async () => {
          await acquire(a, ns, id)
          const busy = await inTransaction(b, () => acquire(b, ns, id, { timeoutMs: 200 }))
            .then(() => null, (error) => error)
          assert.ok(busy instanceof LockBusy, String(busy))
          assert.equal(busy.sqlstate, '55P03')
        })
      } finally {
        await a.end()
        await b.end()
      }
      await withLease(where, ns, id, { ttlMs: 5000 }, async () => {
        assert.equal(await tryAcquireLease(where, ns, id, { ttlMs: 5000 }), null)
        await assert.rejects(acquireLease(where, ns, id, { ttlMs: 5000 }), LockBusy)
      })
    })

    test('lease_take_renew_release', async () => {
      const [ns, id] = key()
      const lease = await acquireLease(where, ns, id, { ttlMs: 1200 })
      try {
        assert.ok(lease.token > 0n && !lease.lost)
        // Three times its ttl: only the renewer keeps it.
        await sleep(3600)
        assert.ok(!lease.lost, lease.lostReason)
        assert.deepEqual(await leaseRow(ns, id), { token: lease.token, owner: lease.owner, live: true })
        assert.ok(lease.validForMs > 0 && lease.validForMs <= 1200)
        lease.check()
      } finally {
        assert.equal(await lease.release(), true)
      }
      assert.ok(lease.signal.aborted && lease.lostReason === 'released')
      assert.ok(lease.signal.reason instanceof LeaseLost)
      assert.equal(await leaseRow(ns, id), null)
      assert.throws(() => lease.check(), LeaseLost)
    })

    test('lease_wait_with_timeout', async () => {
      const [ns, id] = key()
      await withLease(where, ns, id, { ttlMs: 10000 }, async (held) => {
        let started = performance.now()
        assert.equal(await tryAcquireLease(where, ns, id, { ttlMs: 5000, waitMs: 500 }), null)
        const waited = performance.now() - started
        assert.ok(waited >= 450 && waited < 3000, `waited ${waited} ms`)
        setTimeout(() => held.release(), 300)
        started = performance.now()
        await withLease(where, ns, id, { ttlMs: 5000, waitMs: 5000 }, (next) => {
          // Woken at the release's commit, not at the end of the wait or the ttl.
          assert.ok(performance.now() - started < 2000)
          assert.ok(next.token > held.token)
        })
      })
    })

    test('stale_write_refused', async () => {
      const [ns, id] = key()
      const row = await docId()
      const first = await acquireLease(where, ns, id, { ttlMs: 5000 })
      await first.release()
      await withLease(where, ns, id, { ttlMs: 5000 }, (second) => withClient(where, async (client) => {
        assert.ok(second.token > first.token)
        await fencedUpdate(client, 'documents', row, second.token, { body: 'second' })
        const stale = await fencedUpdate(client, 'documents', row, first.token, { body: 'first' })
          .then(() => null, (error) => error)
        assert.ok(stale instanceof StaleToken, String(stale))
        assert.deepEqual([stale.offered, stale.accepted, stale.sqlstate],
          [first.token, second.token, 'SF001'])
        assert.equal(await body(row), 'second')
        const resource = `node-resource-${id}`
        await fenceCheck(client, resource, second.token)
        const refused = await fenceCheck(client, resource, first.token).then(() => null, (e) => e)
        assert.ok(refused instanceof StaleToken)
        assert.deepEqual([refused.accepted, refused.resource], [second.token, resource])
      }))
    })

    test('owner_rule', async () => {
      const [ns, id] = key()
      const lease = await acquireLease(where, ns, id, { ttlMs: 1500, owner: 'worker-a' })
      assert.equal(await tryAcquireLease(where, ns, id, { ttlMs: 5000, owner: 'worker-b' }), null)
      // The same owner again (another process of it, behind a pooler): the same lease and token,
      // not a new one; its release ends the lease for both handles.
      const again = await acquireLease(where, ns, id, { ttlMs: 5000, owner: 'worker-a' })
      assert.equal(again.token, lease.token)
      assert.equal(await again.release(), true)
      assert.ok(await abortedWithin(lease.signal, 1500))
      assert.equal(lease.lostReason, LOST_NOT_HELD)
      await lease.release()
      await withLease(where, ns, id, { ttlMs: 5000, owner: 'worker-b' }, async (other) => {
        assert.ok(other.token > lease.token)
        // Owners the library makes differ from call to call.
        assert.equal(await tryAcquireLease(where, ns, id, { ttlMs: 5000 }), null)
      })
    })

    test('leader_handover', async () => {
      const [ns, id] = key()
      const terms = []
      const stopped = []
      const stops = [new AbortController(), new AbortController()]
      const runs = stops.map((stop, index) =>
        new LeaderElection(where, ns, id, { ttlMs: 2000, retryPeriodMs: 1000 }).run({
          onElected: async (term, signal) => {
            terms.push({ index, term, at: performance.now() })
            await new Promise((resolve) => signal.addEventListener('abort', resolve))
          },
          onStopped: () => stopped.push(index),
          signal: stop.signal,
        }))
      assert.ok(await waitUntil(() => terms.length === 1, 5000))
      const { index: leader, term } = terms[0]
      await sleep(500)
      assert.equal(terms.length, 1) // one leader at a time
      const stoppedAt = performance.now()
      stops[leader].abort()
      assert.ok(await waitUntil(() => terms.length === 2, 5000))
      const { index: follower, term: nextTerm, at } = terms[1]
      assert.notEqual(follower, leader)
      assert.ok(nextTerm > term)
      // Handed over at the release, well within the ttl.
      assert.ok(at - stoppedAt < 1500, `handed over after ${at - stoppedAt} ms`)
      // The stopped leader is told its term ended (after its release); the follower leads on.
      assert.ok(await waitUntil(() => stopped.length === 1, 2000))
      assert.deepEqual(stopped, [leader])
      stops[follower].abort()
      await Promise.all(runs)
      assert.deepEqual(stopped, [leader, follower])
    })

    test('lost_when_no_longer_held', async () => {
      const [ns, id] = key()
      const reasons = []
      const lease = await acquireLease(where, ns, id, { ttlMs: 1500, onLost: (r) => reasons.push(r) })
      const released = await withClient(DIRECT, (client) => client.query(
        'SELECT release_lease($1::int4, $2::int4, $3::int8) AS r', [ns, id, lease.token]))
      assert.equal(released.rows[0].r, true)
      await withLease(where, ns, id, { ttlMs: 5000 }, async (successor) => {
        // Told at its next renewal, within a third of the ttl.
        assert.ok(await abortedWithin(lease.signal, 1500))
        assert.deepEqual(reasons, [LOST_NOT_HELD])
        assert.throws(() => lease.check(), LeaseLost)
        assert.equal(await lease.release(), false)
        assert.equal((await leaseRow(ns, id)).token, successor.token)
      })
      assert.ok(await waitUntil(async () => (await leaseRow(ns, id)) === null, 1000))
    })
  })
}

test('no_prepared_statements', async () => {
  // Behind a transaction-mode pooler a named statement may be missing on the next server
  // connection: the library prepares none.
  const [ns, id] = key()
  const row = await docId()
  await withClient(DIRECT, async (client) => {
    for (let i = 0; i < 8; i++) {
      await inTransaction(client, async () => {
        const token = await acquire(client, ns, id)
        await fencedUpdate(client, 'documents', row, token, { body: 'x' })
      })
    }
    const { rows } = await client.query('SELECT count(*)::int AS n FROM pg_prepared_statements')
    assert.equal(rows[0].n, 0)
  })
})
