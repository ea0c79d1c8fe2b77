//! Fencing tokens: drawn from the extension's own sequence (CACHE 1, NO CYCLE) without SPI.
//!
//! A sequence alone is not crash-safe enough: nextval WAL-logs 32 values ahead and hands out
//! values from that range without writing WAL, and a transaction that wrote no WAL does not
//! flush at commit. So unless `fenced_lock.durable_tokens` is off, the WAL record that covers
//! the sequence's state (the LSN of its page) is flushed, and confirmed by synchronous
//! standbys, before a token is returned. That record is usually on disk already, so most
//! calls pay one comparison.

use crate::errors::FencedError;
use crate::{extension, settings};
use pgrx::pg_sys;

unsafe extern "C-unwind" {
    // Exported by PostgreSQL (commands/sequence.h) but not bound by pgrx. Skipping the
    // permission check lets every role draw tokens while no role but the owner may touch
    // the sequence itself.
    fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
}

/// Draws the next token. `fcinfo` is the calling SQL function's, whose schema is the
/// extension's schema.
pub fn next_token(fcinfo: pg_sys::FunctionCallInfo) -> i64 {
    let sequence = extension::objects(fcinfo).token_sequence;
    // The guard turns an ERROR raised inside (sequence exhausted, read-only transaction)
    // into an orderly unwind through Rust.
    let token = unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| nextval_internal(sequence, false)) };
    if settings::durable_tokens() {
        let covering_lsn = sequence_page_lsn(sequence);
        unsafe { pg_sys::XLogFlush(covering_lsn) };
        wait_for_synchronous_standbys(covering_lsn);
    }
    token
}

/// The LSN of the sequence's page: the end of the WAL record that logged the sequence's
/// current state, which covers every value handed out so far, this token included.
///
/// No content lock is needed: nextval set the page LSN under its exclusive content lock
/// before it released it and returned our value, so the LSN read here is at least the one of
/// the record covering our value. BufferGetLSNAtomic takes the buffer header lock where an
/// unlocked 8-byte read could tear (hint-bit-only writers), and a concurrent nextval can only
/// move the LSN forward: flushing further than needed is harmless.
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

/// With synchronous standbys configured, waits until they flushed `lsn` (applied it, when
/// the session asks for remote_apply), whatever the session's synchronous_commit: any role
/// may set it to off or local, and a token the standby never received could be issued again
/// after a failover. A cancelled or interrupted wait returns without confirmation
/// (PostgreSQL only warns); then no token may be returned.
fn wait_for_synchronous_standbys(lsn: pg_sys::XLogRecPtr) {
    use pg_sys::SyncCommitLevel::*;
    let session_level = unsafe { pg_sys::synchronous_commit } as u32;
    let mode = match session_level {
        SYNCHRONOUS_COMMIT_REMOTE_APPLY => pg_sys::SYNC_REP_WAIT_APPLY,
        _ => pg_sys::SYNC_REP_WAIT_FLUSH,
    } as usize;
    if unsafe { pg_sys::max_wal_senders } == 0 || standbys_confirmed(mode, lsn) {
        return;
    }
    // SyncRepWaitForLSN waits only as far as synchronous_commit asks (not at all below
    // remote_write): raise it to `on` (remote flush) for the wait alone.
    let raise_level = session_level < SYNCHRONOUS_COMMIT_REMOTE_FLUSH;
    unsafe {
        let nest_level = pg_sys::NewGUCNestLevel();
        if raise_level {
            pg_sys::set_config_option(
                c"synchronous_commit".as_ptr(),
                c"on".as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
        }
        // SyncRepWaitForLSN expects interrupts held, as at commit.
        pg_sys::InterruptHoldoffCount += 1;
        pg_sys::SyncRepWaitForLSN(lsn, false);
        pg_sys::InterruptHoldoffCount -= 1;
        // Restores the session's own setting (an error in between restores it at abort).
        pg_sys::AtEOXact_GUC(true, nest_level);
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
            || !crate::compat::sync_standbys_defined(control)
            || (*control).lsn[mode] >= lsn
    }
}
