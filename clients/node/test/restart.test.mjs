// The server restarted under a holder (run last: it ends every session).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { acquireLease, fencedUpdate, tryAcquireLease } from 'fenced-lock'
import { DIRECT, abortedWithin, body, docId, key, restartServer, withClient } from './helpers.mjs'

test('server_restarted', async () => {
  // Its lease's session is gone, so the holder is told (a connection lost is a lease lost, never
  // re-taken with a new token), and once the ttl has passed a successor gets a larger token.
  const [ns, id] = key()
  const row = await docId()
  const reasons = []
  const lease = await acquireLease(DIRECT, ns, id, { ttlMs: 3000, onLost: (r) => reasons.push(r) })
  restartServer()
  assert.ok(await abortedWithin(lease.signal, 3000), 'not told within the ttl')
  assert.match(reasons[0], /connection/)
  assert.equal(await lease.release(), false)
  let successor = null
  const deadline = performance.now() + 6000
  while (successor === null && performance.now() < deadline) {
    successor = await tryAcquireLease(DIRECT, ns, id, { ttlMs: 5000 }).catch(() => null)
    if (successor === null) await sleep(100)
  }
  assert.ok(successor !== null && successor.token > lease.token)
  try {
    await withClient(DIRECT, (client) =>
      fencedUpdate(client, 'documents', row, successor.token, { body: 'after restart' }))
    assert.equal(await body(row), 'after restart')
  } finally {
    await successor.release()
  }
})
