// The test server and PgBouncer that clients/run.sh started, and helpers the tests share.
import { spawn, spawnSync } from 'node:child_process'
import net from 'node:net'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import pg from 'pg'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const SCRIPTS = process.env.CLIENTS_SCRIPTS

// "host=... user=... dbname=..." (libpq's form, from run.sh) as node-postgres' config.
function config(conninfo) {
  const words = Object.fromEntries(conninfo.split(' ').map((word) => word.split('=')))
  return { host: words.host, port: Number(words.port ?? 5432), user: words.user, database: words.dbname }
}

export const DIRECT = config(process.env.CLIENTS_DSN)
export const POOLED = config(process.env.CLIENTS_POOLED_DSN)
export const ROUTES = { direct: DIRECT, pooled: POOLED }

// Keys no other test uses: fresh ids in namespace 7701 (the Python suite has 7700).
export const NS = 7701
let next = 1 + (process.pid % 1000) * 1000
export function key() {
  return [NS, next++]
}

export async function connect(where = DIRECT) {
  const client = new pg.Client(where)
  await client.connect()
  return client
}

/** Runs `work(client)` on a fresh connection, and closes it. */
export async function withClient(where, work) {
  const client = await connect(where)
  try {
    return await work(client)
  } finally {
    await client.end()
  }
}

/** A row of `documents` no other test writes, with no fence yet. */
export async function docId() {
  const row = (next++ % 1000) + 1
  await withClient(DIRECT, (client) =>
    client.query('UPDATE documents SET fence = NULL, body = NULL WHERE id = $1', [row]))
  return row
}

/** The lease's row in fenced_leases: { token, owner, live }, or null. */
export async function leaseRow(ns, id) {
  const { rows } = await withClient(DIRECT, (client) => client.query(
    'SELECT token, owner, expires_at > now() AS live FROM fenced_leases ' +
    'WHERE ns = $1 AND id = $2 AND slot = 0', [ns, id]))
  return rows[0] ? { token: BigInt(rows[0].token), owner: rows[0].owner, live: rows[0].live } : null
}

export async function body(row) {
  const { rows } = await withClient(DIRECT, (client) =>
    client.query('SELECT body FROM documents WHERE id = $1', [row]))
  return rows[0].body
}

export async function waitUntil(predicate, timeoutMs, intervalMs = 20) {
  const deadline = performance.now() + timeoutMs
  while (performance.now() < deadline) {
    if (await predicate()) return true
    await sleep(intervalMs)
  }
  return predicate()
}

/** Resolves when `signal` is aborted (true), or after `ms` (false). */
export function abortedWithin(signal, ms) {
  if (signal.aborted) return Promise.resolve(true)
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms)
    signal.addEventListener('abort', () => { clearTimeout(timer); resolve(true) }, { once: true })
  })
}

/** Stops the test server (fast shutdown: sessions are ended) and starts it again. */
export function restartServer() {
  const pgsh = path.join(SCRIPTS, 'pg.sh')
  const directory = process.env.CLIENTS_SERVER_DIR
  for (const argv of [['stop', directory],
    ['start', directory, ...process.env.CLIENTS_SERVER_OPTIONS.split(' ')]]) {
    const run = spawnSync(pgsh, argv, { stdio: 'inherit' })
    if (run.status !== 0) throw new Error(`pg.sh ${argv[0]} failed`)
  }
}

/** test/holder.mjs in a process of its own; `lines()` yields its output line by line. */
export function holderProcess(...argv) {
  const child = spawn(process.execPath, [path.join(HERE, 'holder.mjs'), ...argv.map(String)],
    { stdio: ['ignore', 'pipe', 'inherit'] })
  child.stdout.setEncoding('utf8')
  let output = ''
  const waiters = []
  child.stdout.on('data', (chunk) => {
    output += chunk
    for (const waiter of waiters.splice(0)) waiter()
  })
  child.output = () => output
  child.waitFor = async (pattern, ms) => {
    const deadline = performance.now() + ms
    while (!pattern.test(output) && performance.now() < deadline) {
      await new Promise((resolve) => {
        waiters.push(resolve)
        setTimeout(resolve, 50)
      })
    }
    return pattern.exec(output)
  }
  return child
}

// Ports below the ephemeral range (32768-60999), from a point that depends on this process.
async function freePort() {
  for (let port = 21000 + (process.pid * 7) % 11000, tries = 0; tries < 11000; tries++) {
    port = port >= 32000 ? 21000 : port + 1
    const free = await new Promise((resolve) => {
      const probe = net.createServer()
      probe.once('error', () => resolve(false))
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)))
    })
    if (free) return port
  }
  throw new Error('no free port')
}

/** scripts/tcp_proxy.py on 127.0.0.1 in front of the test server's socket: `cut()` resets its
 * connections, `blackhole()` lets no byte pass, `restore()` lets traffic flow again. */
export async function startProxy() {
  const port = await freePort()
  const socket = path.join(DIRECT.host, '.s.PGSQL.5432')
  const child = spawn('python3', [path.join(SCRIPTS, 'tcp_proxy.py'), String(port), socket],
    { stdio: 'ignore' })
  const up = await waitUntil(() => new Promise((resolve) => {
    const probe = net.connect(port, '127.0.0.1', () => { probe.destroy(); resolve(true) })
    probe.on('error', () => resolve(false))
  }), 10000, 100)
  if (!up) throw new Error('the proxy did not start')
  return {
    config: { ...DIRECT, host: '127.0.0.1', port },
    cut: () => child.kill('SIGUSR1'),
    blackhole: () => child.kill('SIGHUP'),
    restore: () => child.kill('SIGUSR2'),
    stop: async () => {
      child.kill('SIGTERM')
      await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve)))
    },
  }
}
