//! The shared token allocator (when preloaded, and `fenced_lock.token_block` > 1): each
//! database's tokens come from a block reserved from its sequence in one step, handed out
//! with an atomic increment. `tokens` reserves the blocks (one WAL record each), makes them
//! durable and says whether the sequence is still as the block left it; this module keeps
//! the blocks, and makes each durable before it hands out its first token.
//!
//! Order: every token comes from one atomic counter per database, and a new block starts above
//! every number of the old one, so a later grant always gets a larger token. A block is
//! dropped as soon as the sequence's page changed under it (the owner's setval, ALTER
//! SEQUENCE): the next one starts from the sequence's new state.
//!
//! Reservations are made one at a time per database, under the sequence's own ExclusiveLock (a
//! heavyweight lock, taken by `reserve`): waiters sleep in the lock manager's queue, interruptible
//! and shown as a wait event; a DDL on one database's sequence holds up only that database; and
//! the owner's setval (RowExclusiveLock) cannot land between a reservation's nextval and setval.
//! No LWLock is held across a reservation.
//!
//! The backend that takes a block's middle number reserves the next block then, ahead, and
//! does not wait for its WAL's flush: its transaction's commit flushes it (nextval gave the
//! transaction an ID), and the backend that takes the next block over when the current one is
//! used up flushes what is left, usually nothing (a reservation at the block's end held every
//! backend drawing a token until its WAL was flushed). The reservation moves the sequence's
//! page, which would retire the current block; it does not, because under the sequence's lock
//! the page was as the current block left it, and the current block takes the page's new LSN
//! before anyone else can change the sequence (a backend that reads the page in between waits
//! for the lock, which this reservation does not hold across a flush; a reservation with no
//! block ahead to take over, and a take-over, do). A crash leaves a gap of at most two
//! blocks.

use crate::shmem::{LwLockGuard, Part};
use pgrx::pg_sys;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Databases the allocator serves (one slot each, kept until the server stops; a database
/// beyond them draws every token from its sequence).
const SLOTS: usize = 64;

/// One database's block. `next` and `limit` are read without a lock; a block is published
/// (under the sequence's lock) as `reserved_lsn`, then `next`, then `limit`.
#[repr(C)]
struct Slot {
    database: AtomicU32,
    sequence: AtomicU32,
    /// The next token to hand out.
    next: AtomicI64,
    /// The end (exclusive) of the block.
    limit: AtomicI64,
    /// The sequence page's LSN right after the block was reserved (or the next one ahead).
    reserved_lsn: AtomicU64,
    /// The first number of the block reserved ahead (right above the current one, WAL-logged,
    /// `token_block` numbers), 0 when there is none (tokens start at 1). Read and written under
    /// the sequence's lock.
    ahead_start: AtomicI64,
}

#[repr(C)]
struct Blocks {
    /// Slots are claimed under this lock (never held across I/O or another lock's wait).
    claim_lock: *mut pg_sys::LWLock,
    slots: [Slot; SLOTS],
}

static mut BLOCKS: *mut Blocks = std::ptr::null_mut();
static TRANCHE: &core::ffi::CStr = c"fenced_lock token blocks";

/// The blocks in shared memory (shmem.rs).
pub const BLOCKS_PART: Part = Part {
    request: || unsafe {
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Blocks>());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    },
    place: || unsafe {
        let mut found = false;
        let blocks = pg_sys::ShmemInitStruct(
            c"fenced_lock token blocks".as_ptr(),
            std::mem::size_of::<Blocks>(),
            &mut found,
        ) as *mut Blocks;
        if !found {
            std::ptr::write_bytes(blocks, 0, 1);
        }
        let locks = pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr());
        (*blocks).claim_lock = &raw mut (*locks).lock;
        BLOCKS = blocks;
    },
};

/// A block reserved from the sequence: tokens `start..=end`; the page's LSN after, which the
/// WAL must be flushed up to before the block's first token is handed out.
pub struct Reserved {
    pub start: i64,
    pub end: i64,
    pub lsn: u64,
}

/// How the allocator reaches the sequence (`tokens` does the work).
pub trait Sequence {
    /// The LSN of the sequence's page: it moves with every change of the sequence.
    fn page_lsn(&self) -> u64;
    /// Runs `work` holding the lock that orders reservations (the sequence's ExclusiveLock).
    fn exclusively<R>(&self, work: impl FnOnce() -> R) -> R;
    /// Reserves the next block (under `exclusively`): WAL-logged, not yet flushed.
    fn reserve(&self) -> Reserved;
    /// Flushes the WAL up to `lsn`, and waits for synchronous standbys to confirm it.
    fn make_durable(&self, lsn: u64);
}

/// The next token of `sequence`'s block in this database, reserving a block when the current
/// one is used up or the page's LSN says the sequence changed under it. None when there is no
/// allocator (not preloaded, `token_block` = 1, or no slot left).
pub fn take(oid: pg_sys::Oid, sequence: &impl Sequence) -> Option<i64> {
    let block = crate::settings::token_block();
    if block <= 1 {
        return None;
    }
    let blocks = unsafe { BLOCKS.as_ref()? };
    let slot = slot_for(blocks, oid)?;
    loop {
        if let Some((token, limit)) = take_from(slot, sequence.page_lsn()) {
            if limit - token == (block + 1) / 2 {
                reserve_ahead(slot, sequence);
            }
            return Some(token);
        }
        // Another backend may have reserved a block while this one waited for the lock.
        sequence.exclusively(|| {
            let lsn = sequence.page_lsn();
            if !slot.is_current(lsn) && !slot.take_over_ahead(lsn, sequence) {
                let block = sequence.reserve();
                sequence.make_durable(block.lsn);
                slot.publish(block);
            }
        });
    }
}

/// The next number of `slot`'s block and the block's end, if the block is current (`lsn` is
/// the sequence page's, read before the counter: a block reserved after the read has a later
/// LSN, and a change by someone else moved the LSN too) and not used up.
fn take_from(slot: &Slot, lsn: u64) -> Option<(i64, i64)> {
    while lsn == slot.reserved_lsn.load(Ordering::SeqCst) {
        let next = slot.next.load(Ordering::SeqCst);
        let limit = slot.limit.load(Ordering::SeqCst);
        if next >= limit {
            return None;
        }
        let taken = slot
            .next
            .compare_exchange(next, next + 1, Ordering::SeqCst, Ordering::SeqCst);
        if taken.is_ok() {
            return Some((next, limit));
        }
        // Another backend took `next`: try the following one.
    }
    None
}

/// Reserves the block after `slot`'s current one, unless one is reserved already or the
/// current one is no longer current. The current block takes the page's new LSN, so that the
/// other backends go on drawing from it; the new block is flushed when it is taken over.
fn reserve_ahead(slot: &Slot, sequence: &impl Sequence) {
    sequence.exclusively(|| {
        if slot.ahead_start.load(Ordering::SeqCst) == 0 && slot.is_current(sequence.page_lsn()) {
            let ahead = sequence.reserve();
            slot.reserved_lsn.store(ahead.lsn, Ordering::SeqCst);
            slot.ahead_start.store(ahead.start, Ordering::SeqCst);
        }
    });
}

impl Slot {
    /// The block was reserved at the sequence's current state (`lsn`) and has numbers left.
    fn is_current(&self, lsn: u64) -> bool {
        lsn == self.reserved_lsn.load(Ordering::SeqCst)
            && self.next.load(Ordering::SeqCst) < self.limit.load(Ordering::SeqCst)
    }

    /// Makes the block reserved ahead the current one, durable first, if there is one and the
    /// sequence is as its reservation left it (`lsn`, the page's, is the block's): else it is
    /// dropped (the owner's setval or ALTER SEQUENCE came after it), and false. A wait for the
    /// flush that ends in an error (a cancelled wait for a synchronous standby) leaves the
    /// block ahead for the next try.
    fn take_over_ahead(&self, lsn: u64, sequence: &impl Sequence) -> bool {
        let start = self.ahead_start.load(Ordering::SeqCst);
        if start == 0 {
            return false;
        }
        if lsn != self.reserved_lsn.load(Ordering::SeqCst) {
            self.ahead_start.store(0, Ordering::SeqCst);
            return false;
        }
        sequence.make_durable(lsn);
        self.ahead_start.store(0, Ordering::SeqCst);
        self.publish(Reserved {
            start,
            end: start + crate::settings::token_block() - 1,
            lsn,
        });
        true
    }

    fn publish(&self, block: Reserved) {
        // Closed first, so that no backend takes from the old block meanwhile.
        self.limit.store(i64::MIN, Ordering::SeqCst);
        self.reserved_lsn.store(block.lsn, Ordering::SeqCst);
        self.next.store(block.start, Ordering::SeqCst);
        self.limit.store(block.end + 1, Ordering::SeqCst);
    }
}

/// This database's slot for `sequence`, claimed on first use; a new sequence (DROP and
/// CREATE EXTENSION) takes the database's slot over, with no block.
fn slot_for(blocks: &Blocks, sequence: pg_sys::Oid) -> Option<&Slot> {
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let sequence = sequence.to_u32();
    fn find(slots: &[Slot], database: u32) -> Option<&Slot> {
        slots
            .iter()
            .find(|slot| slot.database.load(Ordering::SeqCst) == database)
    }
    if let Some(slot) = find(&blocks.slots, database) {
        if slot.sequence.load(Ordering::SeqCst) == sequence {
            return Some(slot);
        }
    }
    let _locked = LwLockGuard::acquire(blocks.claim_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
    let slot = find(&blocks.slots, database).or_else(|| {
        blocks
            .slots
            .iter()
            .find(|slot| slot.database.load(Ordering::SeqCst) == 0)
    })?;
    if slot.sequence.load(Ordering::SeqCst) != sequence {
        slot.limit.store(i64::MIN, Ordering::SeqCst);
        slot.next.store(0, Ordering::SeqCst);
        slot.reserved_lsn.store(u64::MAX, Ordering::SeqCst);
        slot.ahead_start.store(0, Ordering::SeqCst);
        slot.sequence.store(sequence, Ordering::SeqCst);
    }
    slot.database.store(database, Ordering::SeqCst);
    Some(slot)
}

/// A shared reference is enough: every field is atomic or set once at startup.
unsafe impl Sync for Blocks {}
