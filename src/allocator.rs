//! The shared token allocator (when preloaded, and `fenced_lock.token_block` > 1): each
//! database's tokens come from a block reserved from its sequence in one step, handed out
//! with an atomic increment. `tokens` reserves the blocks (one WAL record each, durable
//! before the block is published) and says whether the sequence is still as the block left
//! it; this module only keeps the blocks.
//!
//! Order: every token comes from one atomic counter per database, and a new block starts above
//! every number of the old one, so a later grant always gets a larger token. A block is
//! dropped as soon as the sequence's page changed under it (the owner's setval, ALTER
//! SEQUENCE): the next one starts from the sequence's new state.

use crate::shmem::{LwLockGuard, Part};
use pgrx::pg_sys;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Databases the allocator serves (one slot each, kept until the server stops; a database
/// beyond them draws every token from its sequence).
const SLOTS: usize = 64;

/// How long a caller waits for another backend's block reservation before looking again (ms).
const REFILL_WAIT_MS: i64 = 10;

/// One database's block. `next` and `limit` are read without a lock; a reservation (under
/// the lock) publishes `reserved_lsn`, then `next`, then `limit`.
#[repr(C)]
struct Slot {
    database: AtomicU32,
    sequence: AtomicU32,
    /// The next token to hand out.
    next: AtomicI64,
    /// The end (exclusive) of the block.
    limit: AtomicI64,
    /// The sequence page's LSN right after the block was reserved.
    reserved_lsn: AtomicU64,
}

#[repr(C)]
struct Blocks {
    /// Reservations are made one at a time, under this lock; waiters sleep on `refilled`.
    lock: *mut pg_sys::LWLock,
    /// Slots are claimed under this one (never held across I/O).
    claim_lock: *mut pg_sys::LWLock,
    refilled: pg_sys::ConditionVariable,
    slots: [Slot; SLOTS],
}

static mut BLOCKS: *mut Blocks = std::ptr::null_mut();
static TRANCHE: &core::ffi::CStr = c"fenced_lock token blocks";

/// The blocks in shared memory (shmem.rs).
pub const BLOCKS_PART: Part = Part {
    request: || unsafe {
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Blocks>());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 2);
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
            pg_sys::ConditionVariableInit(&mut (*blocks).refilled);
        }
        let locks = pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr());
        (*blocks).lock = &raw mut (*locks).lock;
        (*blocks).claim_lock = &raw mut (*locks.add(1)).lock;
        BLOCKS = blocks;
    },
};

/// A block reserved from the sequence: tokens `start..=end`, durable; the page's LSN after.
pub struct Reserved {
    pub start: i64,
    pub end: i64,
    pub lsn: u64,
}

/// The next token of `sequence`'s block in this database, reserving a block with `reserve`
/// when the current one is used up or `page_lsn()` says the sequence changed under it. None
/// when there is no allocator (not preloaded, `token_block` = 1, or no slot left).
pub fn take(
    sequence: pg_sys::Oid,
    page_lsn: impl Fn() -> u64,
    reserve: impl Fn() -> Reserved,
) -> Option<i64> {
    if crate::settings::token_block() <= 1 {
        return None;
    }
    let blocks = unsafe { BLOCKS.as_ref()? };
    let slot = slot_for(blocks, sequence)?;
    loop {
        // The sequence page is read before the counter: a block reserved after this read
        // has a later LSN, and a change by someone else moved the LSN too.
        let lsn = page_lsn();
        if lsn == slot.reserved_lsn.load(Ordering::SeqCst) {
            let next = slot.next.load(Ordering::SeqCst);
            if next < slot.limit.load(Ordering::SeqCst) {
                let taken =
                    slot.next
                        .compare_exchange(next, next + 1, Ordering::SeqCst, Ordering::SeqCst);
                if taken.is_ok() {
                    return Some(next);
                }
                continue; // another backend took `next`: try the following one
            }
        }
        refill(blocks, slot, &page_lsn, &reserve);
    }
}

/// Reserves a new block for `slot` unless another backend just did (then returns at once),
/// or waits briefly for the backend that is reserving one.
fn refill(
    blocks: &Blocks,
    slot: &Slot,
    page_lsn: &impl Fn() -> u64,
    reserve: &impl Fn() -> Reserved,
) {
    let refilled = &blocks.refilled as *const _ as *mut pg_sys::ConditionVariable;
    if !unsafe { pg_sys::LWLockConditionalAcquire(blocks.lock, pg_sys::LWLockMode::LW_EXCLUSIVE) } {
        // Interruptible, unlike a wait for the LWLock: the reservation may wait for a
        // synchronous standby.
        unsafe {
            pg_sys::ConditionVariableTimedSleep(
                refilled,
                REFILL_WAIT_MS,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ConditionVariableCancelSleep();
        }
        pgrx::check_for_interrupts!();
        return;
    }
    // An ERROR in `reserve` (a cancelled standby wait) releases the lock at abort.
    let _locked = LwLockGuard::adopt(blocks.lock);
    // Another backend may have reserved a block while this one waited for the lock.
    let current = page_lsn();
    let valid = current == slot.reserved_lsn.load(Ordering::SeqCst)
        && slot.next.load(Ordering::SeqCst) < slot.limit.load(Ordering::SeqCst);
    if !valid {
        let block = reserve();
        // Closed first, so that no backend takes from the old block meanwhile.
        slot.limit.store(i64::MIN, Ordering::SeqCst);
        slot.reserved_lsn.store(block.lsn, Ordering::SeqCst);
        slot.next.store(block.start, Ordering::SeqCst);
        slot.limit.store(block.end + 1, Ordering::SeqCst);
    }
    unsafe { pg_sys::ConditionVariableBroadcast(refilled) };
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
        slot.sequence.store(sequence, Ordering::SeqCst);
    }
    slot.database.store(database, Ordering::SeqCst);
    Some(slot)
}

/// A shared reference is enough: every field is atomic or set once at startup.
unsafe impl Sync for Blocks {}
