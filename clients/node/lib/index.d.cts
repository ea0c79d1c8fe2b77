import type { ClientBase, ClientConfig } from 'pg'

/** A fencing token: int8, so a bigint (a JavaScript number loses precision past 2^53). */
export type Token = bigint

/** What the transaction lock and the guarded writes run on: a pg.Client or a pool's client. */
export type Queryable = Pick<ClientBase, 'query'> & {
  getTransactionStatus?: () => string | null
}

export interface AcquireOptions {
  /** Wait at most this long, then LockBusy (55P03); without it, wait as long as it takes. */
  timeoutMs?: number
  /** The shared form (acquire_fenced_shared): other shared holders may hold it too. */
  shared?: boolean
}

export function acquire(client: Queryable, ns: number, id: number,
  options?: AcquireOptions): Promise<Token>
export function tryAcquire(client: Queryable, ns: number, id: number,
  options?: { shared?: boolean }): Promise<Token | null>

export interface FencedUpdateOptions {
  keyColumn?: string
  fenceColumn?: string
}
export function fencedUpdate(client: Queryable, table: string, key: string | number | bigint,
  token: Token, changes: Record<string, unknown>, options?: FencedUpdateOptions): Promise<void>
export function fenceCheck(client: Queryable, resource: string, token: Token): Promise<void>

/** Opens a lease's own connection (by default a pg.Client on `config`). */
export type Connect = (config: string | ClientConfig) => Promise<ClientBase>

export interface LeaseOptions {
  /** The lease's time to live; renewed every third of it. */
  ttlMs: number
  /** The owner id; by default one made for this call (host, pid, random). */
  owner?: string
  /** Wait this long for a held lease to be released or expire. */
  waitMs?: number
  /** Subtracted from the validity (default: a fifth of the ttl, at most 2 s). */
  marginMs?: number
  /** Called once, with the reason, when the lease is lost (not on release). */
  onLost?: (reason: string) => void
  connect?: Connect
}

export class Lease implements AsyncDisposable {
  private constructor()
  readonly ns: number
  readonly id: number
  readonly owner: string
  readonly token: Token
  /** Aborted when the lease ends; its reason is a LeaseLost. */
  readonly signal: AbortSignal
  readonly lost: boolean
  readonly lostReason: string | null
  /** Milliseconds the lease is still known to be valid, on the monotonic clock (0 once lost). */
  readonly validForMs: number
  /** Throws LeaseLost unless the lease is still known to be valid. */
  check(): void
  /** True when the server released it (it was still this holder's). */
  release(): Promise<boolean>
  [Symbol.asyncDispose](): Promise<void>
}

export function tryAcquireLease(config: string | ClientConfig, ns: number, id: number,
  options: LeaseOptions): Promise<Lease | null>
export function acquireLease(config: string | ClientConfig, ns: number, id: number,
  options: LeaseOptions): Promise<Lease>
export function withLease<T>(config: string | ClientConfig, ns: number, id: number,
  options: LeaseOptions, work: (lease: Lease) => Promise<T> | T): Promise<T>

export interface LeaderElectionOptions {
  ttlMs?: number
  owner?: string
  /** How long each campaign waits for the lease (default: half the ttl). */
  retryPeriodMs?: number
  marginMs?: number
  connect?: Connect
}

export interface LeaderCallbacks {
  /** Runs for each term won; should return once `signal` is aborted. */
  onElected: (term: Token, signal: AbortSignal) => Promise<void> | void
  onStopped?: () => Promise<void> | void
  /** Stops campaigning (and ends the current term). */
  signal?: AbortSignal
}

export class LeaderElection {
  constructor(config: string | ClientConfig, ns: number, id: number,
    options?: LeaderElectionOptions)
  readonly owner: string
  run(callbacks: LeaderCallbacks): Promise<void>
}

export function newOwner(): string
export const LOST_NOT_HELD: string
export const LOST_DEADLINE: string
export const LOST_RELEASED: string

export interface ErrorOptions {
  sqlstate?: string | null
  detail?: string | null
  hint?: string | null
  cause?: unknown
}
export class FencedLockError extends Error {
  constructor(message: string, options?: ErrorOptions)
  readonly sqlstate: string | null
  readonly detail: string | null
  readonly hint: string | null
}
/** SF001: the write's token was lower than one the resource accepted. */
export class StaleToken extends FencedLockError {
  readonly offered: Token | null
  readonly accepted: Token | null
  readonly resource: string | null
}
/** 55P03, or a lease held by another owner. */
export class LockBusy extends FencedLockError {}
/** 25P01. */
export class NotInTransaction extends FencedLockError {}
/** 40001, 40P01. */
export class Retryable extends FencedLockError {}
/** 25006. */
export class ReadOnly extends FencedLockError {}
/** SQLSTATE class 08, 57P01-57P03, or a socket gone. */
export class ConnectionLost extends FencedLockError {}
export class LeaseLost extends FencedLockError {
  constructor(reason: string)
  readonly reason: string
}
/** The typed error for a node-postgres error; the error itself when no type fits. */
export function fromDriver(error: unknown): unknown
