//! Fencing tokens: from the extension's own sequence (CACHE 1, NO CYCLE), without SPI.
//!
//! When preloaded, the shared allocator (`allocator`) hands them out from blocks of
//! `fenced_lock.token_block` numbers reserved here in one step: nextval, then setval to the
//! block's end (one WAL record), flushed and confirmed by synchronous standbys before the
//! block's first token is returned. So the sequence's durable value always covers every token
//! handed out, and a crash leaves a gap of at most two blocks (the next one is reserved ahead).
//!
//! Otherwise every token is a nextval. A sequence alone is not crash-safe enough: nextval
//! WAL-logs 32 values ahead and hands out values from that range without writing WAL, and a
//! transaction that wrote no WAL does not flush at commit. So unless
//! `fenced_lock.durable_tokens` is off, the WAL record that covers the sequence's state (the
//! LSN of its page) is flushed, and confirmed by synchronous standbys, before a token is
//! returned. That record is usually on disk already, so most calls pay one comparison.
//!
//! On a new timeline (after a promotion or a point-in-time recovery), the first token drawn
//! moves the sequence `fenced_lock.failover_skip` numbers forward first: the old primary may
//! have handed out tokens whose WAL this server never received. The sequence page's LSN tells:
//! below the timeline's start, nothing was drawn on this timeline yet.

use crate::allocator::{self, Reserved};
use crate::errors::{refuse_in_parallel_mode, FencedError};
use crate::{extension, settings, unguarded};
use pgrx::pg_sys;
use std::cell::Cell;

unsafe extern "C-unwind" {
    // Exported by PostgreSQL (commands/sequence.h) but not bound by pgrx. Skipping the
    // permission check lets every role draw tokens while no role but the owner may touch
    // the sequence itself.
    fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
    // Exported by PostgreSQL (access/timeline.h), not bound by pgrx: the timeline's history,
    // the timeline itself first.
    fn readTimeLineHistory(target: pg_sys::TimeLineID) -> *mut pg_sys::List;
    // The C entry of setval(regclass, bigint), for DirectFunctionCall (pgrx binds a Rust
    // wrapper under this name).
    fn setval_oid(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    // Bound by pgrx with a guard each; `sequence_page_lsn` and `pinned_page_lsn` call them
    // under one.
    fn ReadRecentBuffer(
        storage: crate::compat::Storage,
        fork: pg_sys::ForkNumber::Type,
        block: pg_sys::BlockNumber,
        buffer: pg_sys::Buffer,
    ) -> bool;
    fn BufferGetLSNAtomic(buffer: pg_sys::Buffer) -> pg_sys::XLogRecPtr;
    fn ReleaseBuffer(buffer: pg_sys::Buffer);
}

/// An entry of a timeline's history (access/timeline.h).
#[repr(C)]
struct TimeLineHistoryEntry {
    tli: pg_sys::TimeLineID,
    begin: pg_sys::XLogRecPtr,
    end: pg_sys::XLogRecPtr,
}

/// Draws the next token. `fcinfo` is the calling SQL function's, whose schema is the
/// extension's schema.
pub fn next_token(fcinfo: pg_sys::FunctionCallInfo) -> i64 {
    // The net under every caller's own check (errors::refuse_in_parallel_mode): nextval
    // refuses in parallel mode, but a block's counter would not.
    if unguarded::in_parallel_mode() {
        let name = unsafe { pg_sys::get_func_name((*(*fcinfo).flinfo).fn_oid) };
        refuse_in_parallel_mode(&unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy());
    }
    let sequence = extension::objects(fcinfo).token_sequence;
    // A token is a write to the sequence, whether or not this one comes from a block:
    // PostgreSQL's own 25006 in a read-only transaction, as nextval raises it.
    if unsafe { pg_sys::XactReadOnly } {
        unsafe { pg_sys::PreventCommandIfReadOnly(c"nextval()".as_ptr()) };
    }
    if let Some(token) = allocator::take(sequence, &TokenSequence(sequence)) {
        return token;
    }
    skip_forward_on_new_timeline(sequence);
    let token = nextval(sequence);
    if settings::durable_tokens() {
        make_durable(sequence_page_lsn(sequence));
    }
    token
}

/// advance_fencing_tokens: the sequence moved to at least `past` (with the failover skip
/// first, should this be the timeline's first draw), WAL-logged, flushed and confirmed by
/// synchronous standbys before it returns. The setval always happens: it changes the sequence's
/// page, which retires the shared allocator's current block, so no token from that block is
/// handed out after this returns. Under the sequence's ExclusiveLock, so that no block
/// reservation moves the sequence past `past` in between and is then set back.
pub fn advance_past(fcinfo: pg_sys::FunctionCallInfo, past: i64) -> i64 {
    let sequence = extension::objects(fcinfo).token_sequence;
    unsafe { pg_sys::PreventCommandIfReadOnly(c"advance_fencing_tokens()".as_ptr()) };
    exclusively(sequence, || {
        let skip = pending_skip(sequence);
        if skip > 0 {
            crate::stats::failover_skipped();
        }
        // With the caller's own privileges on the sequence (42501 for any role but its owner).
        let drawn = draw(sequence, true);
        let position = drawn.saturating_add(skip).max(past);
        setval(sequence, position);
        make_durable(sequence_page_lsn(sequence));
        position
    })
}

/// nextval without a privilege check: tokens are drawn for every role.
fn nextval(sequence: pg_sys::Oid) -> i64 {
    draw(sequence, false)
}

fn draw(sequence: pg_sys::Oid, check_permissions: bool) -> i64 {
    // The guard turns an ERROR raised inside (sequence exhausted, read-only transaction,
    // permission denied) into an orderly unwind through Rust.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| nextval_internal(sequence, check_permissions)) }
}

/// setval(sequence, value): the sequence's last value, WAL-logged at once. As the sequence's
/// owner: the functions draw tokens for every role, which has no rights on the sequence.
fn setval(sequence: pg_sys::Oid, value: i64) {
    extension::as_owner_of(sequence, |_| unsafe {
        pg_sys::DirectFunctionCall2Coll(
            Some(setval_oid),
            pg_sys::InvalidOid,
            pg_sys::Datum::from(sequence),
            pg_sys::Datum::from(value),
        )
    });
}

/// Flushes the WAL up to `lsn`, and waits for synchronous standbys to confirm it.
fn make_durable(lsn: pg_sys::XLogRecPtr) {
    unsafe { pg_sys::XLogFlush(lsn) };
    wait_for_synchronous_standbys(lsn);
}

/// The token sequence as the shared allocator reaches it.
struct TokenSequence(pg_sys::Oid);

impl allocator::Sequence for TokenSequence {
    fn page_lsn(&self) -> u64 {
        sequence_page_lsn(self.0)
    }

    fn exclusively<R>(&self, work: impl FnOnce() -> R) -> R {
        exclusively(self.0, work)
    }

    /// The next `token_block` tokens, WAL-logged (the allocator makes them durable before it
    /// hands them out).
    fn reserve(&self) -> Reserved {
        let sequence = self.0;
        let skip = pending_skip(sequence);
        if skip > 0 {
            crate::stats::failover_skipped();
        }
        let start = nextval(sequence).saturating_add(skip);
        // The allocator's limit (the block's end + 1) must fit in a bigint too.
        let end = (start.checked_add(settings::token_block() - 1))
            .filter(|&end| end < i64::MAX)
            .unwrap_or_else(|| FencedError::TokensExhausted { position: start }.raise());
        setval(sequence, end);
        let lsn = sequence_page_lsn(sequence);
        Reserved { start, end, lsn }
    }

    fn make_durable(&self, lsn: u64) {
        make_durable(lsn);
    }
}

/// Runs `work` under the sequence's ExclusiveLock, which every nextval and setval waits for
/// (they take RowExclusiveLock): nothing moves the sequence between `work`'s own nextval and
/// setval, the owner's setval included. Only this one sequence's users wait for it, in the lock
/// manager (interruptible, deadlock-checked, under lock_timeout, shown in pg_stat_activity);
/// an ERROR in `work` releases it at abort.
fn exclusively<R>(sequence: pg_sys::Oid, work: impl FnOnce() -> R) -> R {
    let exclusive = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    let row_exclusive = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    let row_exclusive_held = holds_relation_lock(sequence, row_exclusive);
    unsafe { pg_sys::LockRelationOid(sequence, exclusive) };
    let result = work();
    // nextval and setval keep a RowExclusiveLock until the transaction ends (sequence.c), and
    // the next backend's ExclusiveLock would wait for that end: let go of the one they took
    // here. Until then this ExclusiveLock stood in for it.
    if !row_exclusive_held && holds_relation_lock(sequence, row_exclusive) {
        unsafe {
            let current = pg_sys::CurrentResourceOwner;
            pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
            pg_sys::UnlockRelationOid(sequence, row_exclusive);
            pg_sys::CurrentResourceOwner = current;
        }
    }
    unsafe { pg_sys::UnlockRelationOid(sequence, exclusive) };
    result
}

/// Whether this backend holds `relation` (of this database) in exactly `mode`.
fn holds_relation_lock(relation: pg_sys::Oid, mode: pg_sys::LOCKMODE) -> bool {
    let tag = pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: relation.to_u32(),
        locktag_field3: 0,
        locktag_field4: 0,
        locktag_type: pg_sys::LockTagType::LOCKTAG_RELATION as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    };
    crate::compat::lock_held_by_me(&tag, mode)
}

thread_local! {
    /// The timeline and sequence whose first token this backend has seen to (per-call path).
    static TIMELINE_SEEN: Cell<Option<(pg_sys::TimeLineID, pg_sys::Oid)>> = const { Cell::new(None) };
}

/// The per-call path's part of the failover skip: once per backend and timeline.
fn skip_forward_on_new_timeline(sequence: pg_sys::Oid) {
    let timeline = unsafe { pg_sys::GetWALInsertionTimeLine() };
    if TIMELINE_SEEN.get() == Some((timeline, sequence)) {
        return;
    }
    if pending_skip(sequence) > 0 {
        // No other backend draws a token between this check and the skip, and no two
        // backends skip from the same value.
        exclusively(sequence, || {
            let skip = pending_skip(sequence);
            if skip > 0 {
                setval(sequence, nextval(sequence).saturating_add(skip));
                crate::stats::failover_skipped();
            }
        });
    }
    TIMELINE_SEEN.set(Some((timeline, sequence)));
}

/// The failover skip that the next draw from `sequence` owes: fenced_lock.failover_skip on a
/// timeline where nothing was drawn yet, else 0. Read before that draw, which ends it.
fn pending_skip(sequence: pg_sys::Oid) -> i64 {
    let skip = settings::failover_skip();
    match skip > 0 && on_new_timeline(sequence) {
        true => skip,
        false => 0,
    }
}

/// True when nothing was drawn from `sequence` on the current timeline yet: its page was
/// last written by a record that ended no later than where the timeline began (on the old
/// primary, or before a recovery's end; the last record replayed ends exactly there).
fn on_new_timeline(sequence: pg_sys::Oid) -> bool {
    sequence_page_lsn(sequence) <= timeline_start()
}

thread_local! {
    static TIMELINE_START: Cell<Option<(pg_sys::TimeLineID, pg_sys::XLogRecPtr)>> =
        const { Cell::new(None) };
}

/// Where the current timeline began (0 for the first one): read from its history file once
/// per backend and timeline.
fn timeline_start() -> pg_sys::XLogRecPtr {
    let timeline = unsafe { pg_sys::GetWALInsertionTimeLine() };
    if let Some((cached, start)) = TIMELINE_START.get() {
        if cached == timeline {
            return start;
        }
    }
    let start = unsafe {
        let history = pg_sys::ffi::pg_guard_ffi_boundary(|| readTimeLineHistory(timeline));
        (0..(*history).length as usize)
            .map(|i| &*((*(*history).elements.add(i)).ptr_value as *const TimeLineHistoryEntry))
            .find(|entry| entry.tli == timeline)
            .map_or(0, |entry| entry.begin)
    };
    TIMELINE_START.set(Some((timeline, start)));
    start
}

/// The LSN of the sequence's page: the end of the WAL record that logged the sequence's
/// current state, which covers every value handed out so far, this token included. Any
/// change of the sequence (nextval's WAL, setval, ALTER SEQUENCE) moves it.
///
/// No content lock is needed: nextval set the page LSN under its exclusive content lock
/// before it released it and returned our value, so the LSN read here is at least the one of
/// the record covering our value. BufferGetLSNAtomic takes the buffer header lock where an
/// unlocked 8-byte read could tear (hint-bit-only writers), and a concurrent nextval can only
/// move the LSN forward: flushing further than needed is harmless.
///
/// The page is read from the buffer it was found in last time when that buffer still holds it
/// (ReadRecentBuffer checks the buffer's tag and pins it): no relation to open, no buffer
/// mapping to search, on every call of the shared allocator. A setval changes the page in
/// place, so the buffer shows it; a dropped or rewritten sequence's buffers are invalidated
/// (their tag no longer matches), and the page is then looked up as nextval does.
fn sequence_page_lsn(sequence: pg_sys::Oid) -> pg_sys::XLogRecPtr {
    if let Some((cached, storage, buffer)) = SEQUENCE_PAGE.get() {
        let recent = (cached == sequence).then(|| unsafe {
            unguarded::guarded(|| {
                ReadRecentBuffer(storage, pg_sys::ForkNumber::MAIN_FORKNUM, 0, buffer)
                    .then(|| pinned_page_lsn(buffer))
            })
        });
        if let Some(Some(lsn)) = recent {
            return lsn;
        }
    }
    unsafe {
        // As nextval does: the lock keeps the sequence from being dropped meanwhile.
        let relation = pg_sys::relation_open(sequence, pg_sys::AccessShareLock as _);
        let buffer = pg_sys::ReadBuffer(relation, 0);
        SEQUENCE_PAGE.set(Some((
            sequence,
            crate::compat::storage_of(relation),
            buffer,
        )));
        let lsn = unguarded::guarded(|| pinned_page_lsn(buffer));
        pg_sys::relation_close(relation, pg_sys::NoLock as _);
        lsn
    }
}

thread_local! {
    /// The sequence whose page `sequence_page_lsn` read last, its storage and its buffer.
    static SEQUENCE_PAGE: Cell<Option<(pg_sys::Oid, crate::compat::Storage, pg_sys::Buffer)>> =
        const { Cell::new(None) };
}

/// The LSN of the page in `buffer`, which this backend pinned; releases the pin.
///
/// # Safety
/// `buffer` must be pinned by this backend, and the call made under `unguarded::guarded`.
unsafe fn pinned_page_lsn(buffer: pg_sys::Buffer) -> pg_sys::XLogRecPtr {
    unsafe {
        let lsn = BufferGetLSNAtomic(buffer);
        ReleaseBuffer(buffer);
        lsn
    }
}

/// With synchronous standbys configured, waits until they flushed `lsn`, whatever the
/// session's synchronous_commit: any role may set it to off or local, and a token the standby
/// never received could be issued again after a failover. Flushed is what a token needs, and
/// all that is waited for and checked: with remote_apply, SyncRepWaitForLSN would wait for
/// replay instead (not less than a flush, but an apply check would then fail whenever replay
/// lags). A cancelled or interrupted wait returns without confirmation (PostgreSQL only
/// warns); then no token may be returned.
fn wait_for_synchronous_standbys(lsn: pg_sys::XLogRecPtr) {
    let mode = pg_sys::SYNC_REP_WAIT_FLUSH as usize;
    if unsafe { pg_sys::max_wal_senders } == 0 || standbys_confirmed(mode, lsn) {
        return;
    }
    // SyncRepWaitForLSN waits as far as synchronous_commit asks (not at all below
    // remote_write): `on` (remote flush) for the wait alone.
    let session_level = unsafe { pg_sys::synchronous_commit } as u32;
    let set_level = session_level != pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_FLUSH;
    unsafe {
        let nest_level = pg_sys::NewGUCNestLevel();
        if set_level {
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
