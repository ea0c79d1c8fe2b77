//! Fencing tokens: drawn from the extension's own sequence (CACHE 1, NO CYCLE), found in the
//! schema of the calling function rather than through search_path, and called without SPI.
//!
//! A sequence alone is not crash-safe enough: nextval WAL-logs 32 values ahead and hands out
//! values from that range without writing WAL, and a transaction that wrote no WAL does not
//! flush at commit. So unless `fenced_lock.durable_tokens` is off, the WAL record that covers
//! the sequence's state (the LSN of its page) is flushed, and confirmed by synchronous
//! standbys, before a token is returned. That record is usually on disk already, so most
//! calls pay one comparison.

use crate::errors::FencedError;
use crate::settings;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

const SEQUENCE_NAME: &core::ffi::CStr = c"fencing_token_seq";

thread_local! {
    /// The sequence's OID, resolved on first use; reset when the relcache says it changed
    /// (for example DROP EXTENSION followed by CREATE EXTENSION in the same session).
    static SEQUENCE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

unsafe extern "C-unwind" {
    // Exported by PostgreSQL (commands/sequence.h) but not bound by pgrx. Skipping the
    // permission check lets every role draw tokens while no role but the owner may touch
    // the sequence itself.
    fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
}

/// Draws the next token. `fcinfo` is the calling SQL function's, whose schema is the
/// extension's schema.
pub fn next_token(fcinfo: pg_sys::FunctionCallInfo) -> i64 {
    let sequence = sequence_oid(fcinfo);
    // The guard turns an ERROR raised inside (sequence exhausted, read-only transaction)
    // into an orderly unwind through Rust.
    let token = unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| nextval_internal(sequence, false)) };
    if settings::DURABLE_TOKENS.get() {
        let covering_lsn = sequence_page_lsn(sequence);
        unsafe { pg_sys::XLogFlush(covering_lsn) };
        wait_for_synchronous_standbys(covering_lsn);
    }
    token
}

/// The LSN of the sequence's page: the end of the WAL record that logged the sequence's
/// current state, which covers every value handed out so far, this token included.
fn sequence_page_lsn(sequence: pg_sys::Oid) -> pg_sys::XLogRecPtr {
    unsafe {
        // nextval has locked and opened the sequence; this only looks it up.
        let relation = pg_sys::relation_open(sequence, pg_sys::NoLock as _);
        let buffer = pg_sys::ReadBuffer(relation, 0);
        let lsn = pg_sys::BufferGetLSNAtomic(buffer);
        pg_sys::ReleaseBuffer(buffer);
        pg_sys::relation_close(relation, pg_sys::NoLock as _);
        lsn
    }
}

/// With synchronous replication in force (as for a commit), waits until the synchronous
/// standbys confirmed `lsn`. A cancelled or interrupted wait returns without confirmation
/// (PostgreSQL only warns); then no token may be returned, since a failover could lose it.
fn wait_for_synchronous_standbys(lsn: pg_sys::XLogRecPtr) {
    use pg_sys::SyncCommitLevel::*;
    let mode = match unsafe { pg_sys::synchronous_commit } as u32 {
        SYNCHRONOUS_COMMIT_REMOTE_WRITE => pg_sys::SYNC_REP_WAIT_WRITE,
        SYNCHRONOUS_COMMIT_REMOTE_FLUSH => pg_sys::SYNC_REP_WAIT_FLUSH,
        SYNCHRONOUS_COMMIT_REMOTE_APPLY => pg_sys::SYNC_REP_WAIT_APPLY,
        _ => return,
    } as usize;
    if unsafe { pg_sys::max_wal_senders } == 0 || standbys_confirmed(mode, lsn) {
        return;
    }
    unsafe {
        // SyncRepWaitForLSN expects interrupts held, as at commit.
        pg_sys::InterruptHoldoffCount += 1;
        pg_sys::SyncRepWaitForLSN(lsn, false);
        pg_sys::InterruptHoldoffCount -= 1;
    }
    if !standbys_confirmed(mode, lsn) {
        FencedError::TokenNotReplicated.raise();
    }
}

/// True when no synchronous standby is configured (nothing to wait for, as for a commit) or
/// they have confirmed `lsn`. Read without SyncRepLock: both fields only move forward here,
/// and a stale answer only means one more trip through SyncRepWaitForLSN, which rechecks.
fn standbys_confirmed(mode: usize, lsn: pg_sys::XLogRecPtr) -> bool {
    unsafe {
        let control = pg_sys::WalSndCtl;
        control.is_null()
            || (*control).sync_standbys_status & pg_sys::SYNC_STANDBY_DEFINED as u8 == 0
            || (*control).lsn[mode] >= lsn
    }
}

fn sequence_oid(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Oid {
    let cached = SEQUENCE.get();
    if cached != pg_sys::InvalidOid {
        return cached;
    }
    let resolved = unsafe {
        let function = (*(*fcinfo).flinfo).fn_oid;
        let schema = pg_sys::get_func_namespace(function);
        pg_sys::get_relname_relid(SEQUENCE_NAME.as_ptr(), schema)
    };
    if resolved == pg_sys::InvalidOid {
        FencedError::TokenSequenceMissing.raise();
    }
    SEQUENCE.set(resolved);
    resolved
}

pub fn register_invalidation_callback() {
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), 0.into()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    // InvalidOid means "every relation" (a cache reset).
    if relid == pg_sys::InvalidOid || relid == SEQUENCE.get() {
        SEQUENCE.set(pg_sys::InvalidOid);
    }
}
