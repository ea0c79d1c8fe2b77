// Must not compile: a token is a bigint, and a lease needs its ttl.
import { acquireLease } from 'fenced-lock'

export const token: number = (await acquireLease('', 1, 2, { ttlMs: 1000 })).token
export const lease = acquireLease('', 1, 2, {})
