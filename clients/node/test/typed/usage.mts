// Compiled with tsc --strict against the installed package (ES module resolution): the
// declarations must describe the API as a TypeScript user calls it.
import pg from 'pg'
import fencedLock, {
  LeaderElection, LeaseLost, StaleToken, acquire, acquireLease, fencedUpdate, tryAcquire,
  type Lease, type Token,
} from 'fenced-lock'

export async function work(client: pg.Client, config: pg.ClientConfig): Promise<Token | null> {
  await client.query('BEGIN')
  const token: Token = await acquire(client, 1001, 42, { timeoutMs: 500 })
  const maybe: Token | null = await tryAcquire(client, 1001, 43, { shared: true })
  await client.query('COMMIT')
  await using lease: Lease = await acquireLease(config, 1001, 44, {
    ttlMs: 30000, onLost: (reason: string) => console.error(reason),
  })
  lease.signal.addEventListener('abort', () => {})
  try {
    lease.check()
    await fencedUpdate(client, 'jobs', 7, lease.token, { state: 'done' })
  } catch (error) {
    if (error instanceof StaleToken) return error.accepted
    if (error instanceof LeaseLost) return null
    throw error
  }
  const validFor: number = lease.validForMs
  await new LeaderElection(config, 1001, 1, { ttlMs: 15000 }).run({
    onElected: async (term: Token, signal: AbortSignal) => { void term; void signal },
  })
  return fencedLock.newOwner().length + validFor > 0 ? token : maybe
}
