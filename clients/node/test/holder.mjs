// A lease holder in a process of its own, for the fault tests: `holder.mjs CONFIG NS ID TTL_MS
// ROW` takes the lease and prints "token N"; then, as a careful holder does, checks the lease
// before each step of its work; once it finds the lease lost it prints "lost REASON" and tries
// its write anyway with its token (row ROW of documents), printing "refused OFFERED ACCEPTED" or
// "written".
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { LeaseLost, StaleToken, acquireLease, fencedUpdate } from 'fenced-lock'

const [config, ns, id, ttlMs, row] = process.argv.slice(2)
const where = JSON.parse(config)
const lease = await acquireLease(where, Number(ns), Number(id), { ttlMs: Number(ttlMs) })
console.log('token', String(lease.token))
try {
  for (;;) {
    lease.check()
    await sleep(10)
  }
} catch (error) {
  if (!(error instanceof LeaseLost)) throw error
  console.log('lost', error.reason)
}
const client = new pg.Client(where)
await client.connect()
try {
  await fencedUpdate(client, 'documents', row, lease.token, { body: 'paused holder' })
  console.log('written')
} catch (error) {
  if (!(error instanceof StaleToken)) throw error
  console.log('refused', String(error.offered), String(error.accepted))
}
await client.end()
await lease.release()
