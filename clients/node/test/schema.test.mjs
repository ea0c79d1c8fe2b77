// The extension in a schema of its own (CREATE EXTENSION fenced_lock SCHEMA fenced), found
// through the connection's search_path: a lock, a guarded write, a lease.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { StaleToken, acquire, acquireLease, fencedUpdate } from 'fenced-lock'
import { DIRECT, withClient } from './helpers.mjs'

const SCHEMA = { ...DIRECT, database: `${DIRECT.database}_schema`, options: '-c search_path=fenced,public' }

test('the library finds the extension through search_path', async () => {
  const tokens = await withClient(SCHEMA, async (client) => {
    const { rows } = await client.query(
      "SELECT extnamespace::regnamespace::text AS schema FROM pg_extension WHERE extname = 'fenced_lock'")
    assert.equal(rows[0].schema, 'fenced')
    const taken = []
    for (const body of ['first', 'second']) {
      await client.query('BEGIN')
      const token = await acquire(client, 1002, 1)
      await fencedUpdate(client, 'documents', 1, token, { body })
      await client.query('COMMIT')
      taken.push(token)
    }
    assert.ok(taken[1] > taken[0])
    await client.query('BEGIN')
    const stale = await fencedUpdate(client, 'documents', 1, taken[0], { body: 'stale' })
      .then(() => null, (error) => error)
    await client.query('ROLLBACK')
    assert.ok(stale instanceof StaleToken, String(stale))
    return taken
  })
  const lease = await acquireLease(SCHEMA, 1002, 2, { ttlMs: 30000 })
  try {
    assert.ok(lease.token > tokens[1])
  } finally {
    await lease.release()
  }
})
