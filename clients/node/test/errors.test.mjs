// Typed errors from the SQLSTATEs the server raises, and the library's own refusals.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import {
  ConnectionLost, LockBusy, ReadOnly, Retryable, StaleToken, acquire, acquireLease, fenceCheck,
  fromDriver,
} from 'fenced-lock'
import { DIRECT, connect, key, withClient } from './helpers.mjs'

const failure = (promise) => promise.then(() => null, (error) => error)

test('read-only transaction', async () => {
  const [ns, id] = key()
  await withClient(DIRECT, async (client) => {
    await client.query('BEGIN READ ONLY')
    const refused = await failure(acquire(client, ns, id))
    await client.query('ROLLBACK')
    assert.ok(refused instanceof ReadOnly, String(refused))
    assert.equal(refused.sqlstate, '25006')
  })
})

test('deadlock is retryable', async () => {
  const [ns, id] = key()
  const a = await connect()
  const b = await connect()
  try {
    await a.query('BEGIN')
    await b.query('BEGIN')
    await acquire(a, ns, id)
    await acquire(b, ns, id + 1)
    const outcomes = await Promise.all([
      failure(acquire(a, ns, id + 1)), failure(acquire(b, ns, id))])
    const errors = outcomes.filter((outcome) => outcome !== null)
    assert.equal(errors.length, 1, String(errors))
    assert.ok(errors[0] instanceof Retryable)
    assert.equal(errors[0].sqlstate, '40P01')
  } finally {
    await a.query('ROLLBACK').catch(() => {})
    await b.query('ROLLBACK').catch(() => {})
    await a.end()
    await b.end()
  }
})

test('terminated backend is connection lost', async () => {
  const [ns, id] = key()
  const client = await connect()
  client.on('error', () => {})
  try {
    await client.query('BEGIN')
    await acquire(client, ns, id)
    const { rows } = await client.query('SELECT pg_backend_pid() AS pid')
    await withClient(DIRECT, (admin) => admin.query('SELECT pg_terminate_backend($1)', [rows[0].pid]))
    const lost = await failure(acquire(client, ns, id + 1))
    assert.ok(lost instanceof ConnectionLost, String(lost))
  } finally {
    await client.end().catch(() => {})
  }
})

test('stale token and unmapped errors', async () => {
  await withClient(DIRECT, async (client) => {
    await fenceCheck(client, 'node-errors-resource', 10n)
    const stale = await failure(fenceCheck(client, 'node-errors-resource', 5n))
    assert.ok(stale instanceof StaleToken)
    assert.deepEqual([stale.offered, stale.accepted], [5n, 10n])
    assert.ok(stale.hint && stale.detail)
    assert.equal(stale.cause.code, 'SF001')
    // An error of no type is the driver's own.
    const other = await failure(client.query('SELECT no_such_function()'))
    assert.equal(other.code, '42883')
    assert.equal(fromDriver(other), other)
  })
})

test('lock timeout is busy', async () => {
  const [ns, id] = key()
  const a = await connect()
  const b = await connect()
  try {
    await a.query('BEGIN')
    await acquire(a, ns, id)
    await b.query('BEGIN')
    await b.query("SET LOCAL lock_timeout = '100ms'")
    assert.ok((await failure(acquire(b, ns, id))) instanceof LockBusy)
  } finally {
    await a.end()
    await b.end()
  }
})

test('bad durations are refused before anything is sent', async () => {
  const [ns, id] = key()
  for (const ttlMs of [0, -1, Number.NaN, Infinity, '5000', undefined]) {
    await assert.rejects(acquireLease(DIRECT, ns, id, { ttlMs }), RangeError)
  }
  await assert.rejects(acquireLease(DIRECT, ns, id, { ttlMs: 3000, marginMs: 1000 }), RangeError)
  await assert.rejects(acquireLease(DIRECT, ns, id, { ttlMs: 3000, waitMs: -1 }), RangeError)
})

test('a server that cannot be reached is connection lost', async () => {
  const [ns, id] = key()
  const nowhere = { ...DIRECT, host: '/nonexistent-fenced-lock-socket-dir' }
  const refused = await failure(acquireLease(nowhere, ns, id, { ttlMs: 3000 }))
  assert.ok(refused instanceof ConnectionLost, String(refused))
})
