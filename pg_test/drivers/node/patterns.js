// The driver suite's patterns, run by node-postgres, which sends every parameter untyped (as
// text), directly and through PgBouncer in transaction mode.
//     node patterns.js ROUTE              (ROUTE: direct | pooled)
//     node patterns.js mixed SETTINGS N   (the mixed workload through PgBouncer, run.sh says
//                                          what it checks; SETTINGS: documented | named, the
//                                          control: the same queries with a `name:`)
// Prints one line per pattern, "node-postgres <route> <pattern>: ok" or "... FAILED: why",
// and exits 1 if any failed.
'use strict';
const pg = require('pg');

// int8 arrives as a string unless told otherwise ("9" > "10"): read tokens as BigInt.
pg.types.setTypeParser(20, BigInt);

const route = process.argv[2];
const pooled = route !== 'direct';
const config = {
  host: process.env[pooled ? 'DRIVERS_POOLED_HOST' : 'DRIVERS_HOST'],
  port: Number(process.env[pooled ? 'DRIVERS_POOLED_PORT' : 'DRIVERS_PORT']),
  database: process.env.DRIVERS_DATABASE,
  user: 'postgres',
};
const BASE = pooled ? 500 : 400;

// Named queries are prepared on the server under their name: only the mixed workload's
// control uses them.
let named = false;
const names = new Map();

async function one(client, sql, ...params) {
  if (named && !names.has(sql)) names.set(sql, `q${names.size}`);
  const query = { name: named ? names.get(sql) : undefined, text: sql, values: params };
  const result = await client.query(query);
  return result.rows.length ? Object.values(result.rows[0])[0] : null;
}

async function sqlstateOf(client, sql, ...params) {
  try {
    await one(client, sql, ...params);
  } catch (error) {
    return error.code;
  }
  return null;
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

const patterns = {
  async guarded_write(a) {
    await one(a, 'BEGIN');
    const token = await one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 1);
    const changes = JSON.stringify({ v: `node-postgres ${route}` });
    const written = await one(a, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', BASE + 1,
      token, changes);
    await one(a, 'COMMIT');
    check(typeof token === 'bigint' && token > 0n, `token ${token} is not a positive BigInt`);
    check(written === true, `fenced_update returned ${written}`);
    const stale = await one(a, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', BASE + 1,
      token - 1n, changes);
    check(stale === false, `a lower token wrote: ${stale}`);
    const state = await sqlstateOf(a, 'SELECT fenced_update($1, $2, $3, $4)', 'driver_rows',
      BASE + 1, token - 1n, changes);
    check(state === 'SF001', `fenced_update_strict with a lower token: SQLSTATE ${state}`);
  },

  async skip_if_busy(a, b) {
    await one(a, 'BEGIN');
    await one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 2);
    await one(b, 'BEGIN');
    const busy = await one(b, 'SELECT try_acquire_fenced($1, $2)', 4201, BASE + 2);
    await one(b, 'ROLLBACK');
    await one(a, 'ROLLBACK');
    check(busy === null, `try_acquire_fenced on a held key returned ${busy}`);
  },

  async bounded_wait(a, b) {
    await one(a, 'BEGIN');
    await one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 2);
    await one(b, 'BEGIN');
    // A bare number bound to an interval means seconds: say the unit.
    const state = await sqlstateOf(b, 'SELECT acquire_fenced($1, $2, $3)', 4201, BASE + 2,
      '100 milliseconds');
    await one(b, 'ROLLBACK');
    await one(a, 'ROLLBACK');
    check(state === '55P03', `SQLSTATE ${state}`);
  },

  async stale_write(a) {
    await one(a, 'BEGIN');
    const older = await one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 3);
    const newer = await one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 4);
    await one(a, 'COMMIT');
    const resource = `drivers/node-postgres/${route}`;
    await one(a, 'SELECT fence_check($1, $2)', resource, newer);
    const state = await sqlstateOf(a, 'SELECT fence_check($1, $2)', resource, older);
    check(state === 'SF001', `SQLSTATE ${state}`);
  },

  async named_and_bigint(a) {
    const big = 5000000000n + BigInt(BASE);
    await one(a, 'BEGIN');
    const named = await one(a, 'SELECT acquire_fenced_named($1, $2)', 'drivers', `order:${BASE}`);
    const byBigint = await one(a, 'SELECT acquire_fenced_named($1, $2::bigint::text)', 'drivers', big);
    const byText = await one(a, 'SELECT acquire_fenced_named($1, $2)', 'drivers', big.toString());
    await one(a, 'COMMIT');
    check(byBigint === byText, 'a bigint key and its text are different locks');
    check(named !== byBigint, 'two keys shared a grant');
  },

  async many_keys(a, b) {
    // Two keys in one call, listed in either order: one token; an overlapping try gets NULL.
    await one(a, 'BEGIN');
    const token = await one(a, 'SELECT acquire_fenced_all($1, $2)', 4201, [BASE + 11, BASE + 10]);
    await one(b, 'BEGIN');
    const busy = await one(b, 'SELECT try_acquire_fenced_all($1, $2)', 4201, [BASE + 12, BASE + 11]);
    await one(b, 'ROLLBACK');
    const named = await one(a, 'SELECT acquire_fenced_all_named($1, $2)', 'drivers',
      [`from:${BASE}`, `to:${BASE}`]);
    await one(a, 'COMMIT');
    check(typeof token === 'bigint' && token > 0n, `token ${token}`);
    check(busy === null, `an overlapping set was taken: ${busy}`);
    check(typeof named === 'bigint' && named > token, `named keys gave ${named}`);
  },

  async autocommit(a) {
    const state = await sqlstateOf(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 5);
    check(state === '25P01', `SQLSTATE ${state}`);
  },

  async lease(a, b) {
    // Table-backed leases: every call commits on its own, so they work through the pooler.
    const key = BASE + 7;
    const ttl = '30 seconds';
    const token = await one(a, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, key, 'a', ttl);
    const busy = await one(b, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, key, 'b', ttl);
    const expiry = await one(a, 'SELECT renew_lease($1, $2, $3, $4)', 4203, key, token, ttl);
    const released = await one(a, 'SELECT release_lease($1, $2, $3)', 4203, key, token);
    const taken = await one(b, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, key, 'b', ttl);
    await one(b, 'SELECT release_lease($1, $2, $3)', 4203, key, taken);
    check(typeof token === 'bigint' && token > 0n, `token ${token}`);
    check(busy === null, `another owner got ${busy}`);
    check(expiry instanceof Date, `renew returned ${expiry}`);
    check(released === true && taken > token, `released ${released}, next token ${taken}`);
  },

  async leader_owner(a, b) {
    // The second owner never gets the first's term, whichever server connection it is on.
    const key = BASE + 9;
    const term = await one(a, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4203, key, 'client-a');
    const other = await one(b, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4203, key, 'client-b');
    check(typeof term === 'bigint' && term > 0n, `term ${term}`);
    check(other === null, `a second owner became leader with term ${other}`);
    if (!pooled) {
      const released = await one(a, 'SELECT release_fenced($1, $2, $3)', 4203, key, 'client-a');
      check(released === true, `released ${released}`);
    }
  },

  async permits(a, b) {
    // One permit: a slot and a token as a row; the other client's try gets no row (count 0),
    // never a NULL row; after the holder's commit, a larger token.
    const key = BASE + 13;
    await one(a, 'BEGIN');
    const slot = await one(a, 'SELECT slot FROM acquire_permit($1, $2, $3)', 4206, key, 1);
    const token = await one(a, 'SELECT token FROM acquire_permit($1, $2, $3)', 4206, key, 1);
    await one(b, 'BEGIN');
    const none = await one(b, 'SELECT count(*) FROM try_acquire_permit($1, $2, $3)',
      4206, key, 1);
    await one(b, 'ROLLBACK');
    await one(a, 'COMMIT');
    await one(b, 'BEGIN');
    const later = await one(b, 'SELECT token FROM try_acquire_permit($1, $2, $3)',
      4206, key, 1);
    await one(b, 'COMMIT');
    check(slot === 1 && typeof token === 'bigint' && token > 0n, `slot ${slot}, token ${token}`);
    check(none === 0n, `a second holder of one permit: ${none} rows`);
    check(typeof later === 'bigint' && later > token, `next token ${later}`);
  },

  async lease_permit(a, b) {
    // A permit as a lease: every call commits on its own, so it works through the pooler.
    const key = BASE + 14;
    const ttl = '30 seconds';
    const acquire = 'SELECT token FROM try_acquire_lease_permit($1, $2, $3, $4, $5)';
    const token = await one(a, acquire, 4206, key, 1, 'a', ttl);
    const none = await one(b, 'SELECT count(*) FROM try_acquire_lease_permit($1, $2, $3, $4, $5)',
      4206, key, 1, 'b', ttl);
    const expiry = await one(a, 'SELECT renew_lease($1, $2, $3, $4)', 4206, key, token, ttl);
    const released = await one(a, 'SELECT release_lease($1, $2, $3)', 4206, key, token);
    const taken = await one(b, 'SELECT token FROM acquire_lease_permit($1, $2, $3, $4, $5, $6)',
      4206, key, 1, 'b', ttl, '5 seconds');
    await one(b, 'SELECT release_lease($1, $2, $3)', 4206, key, taken);
    check(typeof token === 'bigint' && token > 0n, `token ${token}`);
    check(none === 0n, `another owner got a permit: ${none} rows`);
    check(expiry instanceof Date, `renew returned ${expiry}`);
    check(released === true && taken > token, `released ${released}, next token ${taken}`);
  },

  async shared_lock(a, b) {
    // Two readers at once, each with its own token; a writer's try is busy (NULL) meanwhile.
    const key = BASE + 15;
    await one(a, 'BEGIN');
    await one(b, 'BEGIN');
    const first = await one(a, 'SELECT acquire_fenced($1, $2, shared => true)', 4206, key);
    const second = await one(b, 'SELECT try_acquire_fenced($1, $2, shared => true)', 4206, key);
    await one(b, 'ROLLBACK');
    await one(b, 'BEGIN');
    const busy = await one(b, 'SELECT try_acquire_fenced($1, $2)', 4206, key);
    await one(b, 'ROLLBACK');
    await one(a, 'COMMIT');
    check(typeof first === 'bigint' && typeof second === 'bigint' && second > first,
      `readers' tokens ${first}, ${second}`);
    check(busy === null, `a writer got ${busy} beside a reader`);
  },

  async session_lease(a) {
    const token = await one(a, 'SELECT acquire_fenced_session($1, $2)', 4201, BASE + 6);
    const held = await one(a, 'SELECT current_fence($1, $2)', 4201, BASE + 6);
    const released = await one(a, 'SELECT release_fenced($1, $2)', 4201, BASE + 6);
    check(held === token && released === true, `held ${held}, released ${released}`);
  },
};

const HELD = 'SELECT token FROM fenced_locks WHERE ns = $1 AND id = $2 AND pid = pg_backend_pid()';

// One transaction of the mixed workload: what was wrong with its answers, or null.
async function mixedTransaction(client, kind, key, row) {
  let problem = null;
  await one(client, 'BEGIN');
  if (kind === 'acquire' || kind === 'try') {
    const fn = kind === 'acquire' ? 'acquire_fenced' : 'try_acquire_fenced';
    const token = await one(client, `SELECT ${fn}($1, $2)`, 4205, key);
    const held = await one(client, HELD, 4205, key);
    if (!(typeof token === 'bigint' && token > 0n && held === token)) {
      problem = `${fn} gave ${token}, fenced_locks shows ${held}`;
    }
  } else if (kind === 'current') {
    const fence = await one(client, 'SELECT current_fence($1, $2)', 4205, key);
    if (fence !== null) problem = `current_fence of a free key gave ${fence}`;
  } else if (kind === 'leader') {
    const term = await one(client, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4205, key, `owner-${key}`);
    const released = await one(client, 'SELECT release_fenced($1, $2, $3)', 4205, key, `owner-${key}`);
    if (!(typeof term === 'bigint' && term > 0n && released === true)) {
      problem = `try_acquire_fenced_session gave ${term}, release_fenced ${released}`;
    }
  } else {
    const token = await one(client, 'SELECT acquire_fenced($1, $2)', 4205, key);
    const written = await one(client, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', row,
      token, JSON.stringify({ v: `${key}` }));
    if (written !== true) problem = `fenced_update with token ${token} gave ${written}`;
  }
  await one(client, 'COMMIT');
  return problem;
}

// A small seeded generator, so each process picks the same sequence on every run.
function picker(seed) {
  let state = seed + 1;
  return (n) => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state % n;
  };
}

async function runMixed(settings, proc) {
  named = settings === 'named';
  const slot = Number(process.env.MIXED_SLOT);
  const clients = [];
  for (let i = 0; i < 6; i += 1) {
    const client = new pg.Client(config);
    client.on('error', () => {}); // a connection the pooler closed: its next query fails
    await client.connect();
    clients.push(client);
  }
  const pick = picker(proc);
  const kinds = ['acquire', 'try', 'current', 'leader', 'update'];
  let wrong = 0;
  let errors = 0;
  let first = null;
  for (let i = 0; i < 150; i += 1) {
    const client = clients[pick(clients.length)];
    const kind = kinds[pick(kinds.length)];
    const key = slot * 10000 + proc * 1000 + i;
    let problem;
    try {
      problem = await mixedTransaction(client, kind, key, slot * 20 + proc * 10 + (i % 10) + 3001);
      if (problem) wrong += 1;
    } catch (error) {
      errors += 1;
      problem = `SQLSTATE ${error.code}: ${String(error.message).split('\n')[0]}`;
      await client.query('ROLLBACK').catch(() => {});
    }
    if (problem && first === null) first = `${kind}: ${problem}`;
  }
  await Promise.all(clients.map((client) => client.end().catch(() => {})));
  console.log(`node-postgres mixed ${settings} p${proc}: 150 transactions, ${wrong} wrong, ${errors} errors`
    + (first ? `; first: ${first}` : ''));
  return wrong === 0 && errors === 0;
}

async function runPatterns() {
  const a = new pg.Client(config);
  const b = new pg.Client(config);
  await a.connect();
  await b.connect();
  let failed = 0;
  for (const [name, pattern] of Object.entries(patterns)) {
    // Session-scoped locks belong to one server connection: not through a transaction pooler.
    if (pooled && name === 'session_lease') continue;
    try {
      await pattern(a, b);
      console.log(`node-postgres ${route} ${name}: ok`);
    } catch (error) {
      failed += 1;
      console.log(`node-postgres ${route} ${name}: FAILED: ${error.message}`);
      await a.query('ROLLBACK').catch(() => {});
      await b.query('ROLLBACK').catch(() => {});
    }
  }
  await a.end();
  await b.end();
  return failed === 0;
}

(route === 'mixed' ? runMixed(process.argv[3], Number(process.argv[4])) : runPatterns())
  .then((ok) => process.exit(ok ? 0 : 1))
  .catch((error) => {
    console.log(`node-postgres ${route}: FAILED: ${error.message}`);
    process.exit(1);
  });
