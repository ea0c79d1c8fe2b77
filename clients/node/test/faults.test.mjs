// Faults on real processes: a holder paused past its ttl, its link cut or blackholed. Each ends
// with the holder told, and nothing taken again behind its back. (The server restart is in
// restart.test.mjs, run last.)
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { LOST_DEADLINE, acquireLease, fencedUpdate, tryAcquireLease, withLease } from 'fenced-lock'
import {
  DIRECT, abortedWithin, body, docId, holderProcess, key, leaseRow, startProxy, waitUntil,
  withClient,
} from './helpers.mjs'

test('paused_holder', async () => {
  // SIGSTOP past the ttl: a successor takes the lease and writes; on resume the holder finds the
  // lease lost before any renewal (by its validity, on its monotonic clock), and its write with
  // the old token is refused.
  const [ns, id] = key()
  const row = await docId()
  const holder = holderProcess(JSON.stringify(DIRECT), ns, id, 2000, row)
  try {
    const token = (await holder.waitFor(/^token (\d+)$/m, 10000))?.[1]
    assert.ok(token, holder.output())
    holder.kill('SIGSTOP')
    await sleep(2500)
    const successor = await withLease(DIRECT, ns, id, { ttlMs: 10000 }, async (successor) => {
      await withClient(DIRECT, (client) =>
        fencedUpdate(client, 'documents', row, successor.token, { body: 'successor' }))
      holder.kill('SIGCONT')
      assert.ok(await holder.waitFor(/^(refused|written).*$/m, 20000), holder.output())
      return successor
    })
    assert.match(holder.output(), new RegExp(`^lost ${LOST_DEADLINE}$`, 'm'))
    assert.match(holder.output(), new RegExp(`^refused ${token} ${successor.token}$`, 'm'))
    assert.equal(await body(row), 'successor')
  } finally {
    holder.kill('SIGKILL')
  }
})

for (const fault of ['cut', 'blackhole']) {
  test(`link_fault (${fault})`, async () => {
    // The lease's connection reset (cut) or silent (blackhole: no byte passes either way): the
    // holder is told within the ttl, and the lease is not taken again with a new token.
    const [ns, id] = key()
    const ttlMs = 3000
    const proxy = await startProxy()
    try {
      const reasons = []
      const lease = await acquireLease(proxy.config, ns, id, { ttlMs, onLost: (r) => reasons.push(r) })
      await sleep(1200) // one renewal through the proxy first
      assert.ok(!lease.lost, lease.lostReason)
      const faultedAt = performance.now()
      proxy[fault]()
      assert.ok(await abortedWithin(lease.signal, ttlMs), `not told within the ttl (${ttlMs} ms)`)
      const toldAfter = performance.now() - faultedAt
      if (fault === 'cut') {
        assert.match(reasons[0], /connection/)
        assert.ok(toldAfter < ttlMs / 3 + 1000, `told after ${toldAfter} ms`)
      } else {
        assert.deepEqual(reasons, [LOST_DEADLINE])
      }
      proxy.restore()
      // The server still has the lease under its one token until it expires; nobody renewed it
      // under another.
      const row = await leaseRow(ns, id)
      assert.ok(row === null || row.token === lease.token)
      assert.ok([true, false].includes(await lease.release()))
      assert.ok(await waitUntil(async () => {
        const next = await tryAcquireLease(DIRECT, ns, id, { ttlMs: 1000 })
        if (next === null) return false
        await next.release()
        return next.token > lease.token
      }, ttlMs + 2000, 100))
    } finally {
      await proxy.stop()
    }
  })
}
