// The CommonJS view of the same declarations (require resolution).
import fencedLock = require('fenced-lock')
import pg = require('pg')

export async function work(pool: pg.Pool): Promise<bigint | null> {
  const client: pg.PoolClient = await pool.connect()
  try {
    await client.query('BEGIN')
    const token: bigint = await fencedLock.acquire(client, 1001, 42)
    await fencedLock.fenceCheck(client, 'jobs', token)
    await client.query('COMMIT')
    return await fencedLock.withLease({ host: '/tmp' }, 1001, 44, { ttlMs: 3000 },
      (lease: fencedLock.Lease) => lease.token)
  } finally {
    client.release()
  }
}
