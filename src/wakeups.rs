//! The wake-up channels of waiting lease and permit acquires: condition variables in shared
//! memory (when preloaded), a key mapped to one of them. A lease's release is broadcast when
//! its transaction commits, once waiters can see it (a wake-up before that would find the
//! lease still held); a permit's once PostgreSQL has released its lock.

use crate::shmem::Part;
use crate::types::LockKey;
use pgrx::pg_guard;
use pgrx::pg_sys;

/// How many condition variables waiting acquires sleep on; a key maps to one of them.
const CHANNELS: usize = 64;

static mut CHANNEL_ARRAY: *mut pg_sys::ConditionVariable = std::ptr::null_mut();

fn size() -> usize {
    CHANNELS * std::mem::size_of::<pg_sys::ConditionVariable>()
}

/// The wake-up channels in shared memory (shmem.rs).
pub const WAKEUPS_PART: Part = Part {
    request: || unsafe { pg_sys::RequestAddinShmemSpace(size()) },
    place: || unsafe {
        let mut found = false;
        let channels =
            pg_sys::ShmemInitStruct(c"fenced_lock lease wakeups".as_ptr(), size(), &mut found)
                as *mut pg_sys::ConditionVariable;
        if !found {
            (0..CHANNELS).for_each(|i| pg_sys::ConditionVariableInit(channels.add(i)));
        }
        CHANNEL_ARRAY = channels;
    },
};

thread_local! {
    /// The wake-up channels of the leases this transaction released: broadcast at commit.
    static RELEASED: std::cell::RefCell<Vec<*mut pg_sys::ConditionVariable>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// The wake-up channels of the permits this transaction holds: broadcast once their
    /// locks are released, at its end (or its savepoint's rollback).
    static PERMITS_HELD: std::cell::RefCell<Vec<*mut pg_sys::ConditionVariable>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

pub fn register_callbacks() {
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut());
        pg_sys::RegisterResourceReleaseCallback(Some(on_locks_released), std::ptr::null_mut());
    }
}

/// Called after each phase of a resource owner's release: after the locks phase of a
/// transaction's end, or of a savepoint's rollback, the permits' locks are gone.
#[pg_guard]
unsafe extern "C-unwind" fn on_locks_released(
    phase: pg_sys::ResourceReleasePhase::Type,
    is_commit: bool,
    is_top_level: bool,
    _arg: *mut core::ffi::c_void,
) {
    let locks_released = phase == pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_LOCKS
        && (is_top_level || !is_commit);
    if !locks_released || PERMITS_HELD.with_borrow(Vec::is_empty) {
        return;
    }
    let mut channels = match is_top_level {
        true => PERMITS_HELD.with_borrow_mut(std::mem::take),
        false => PERMITS_HELD.with_borrow(Vec::clone),
    };
    channels.sort_unstable();
    channels.dedup();
    channels
        .into_iter()
        .for_each(|channel| unsafe { pg_sys::ConditionVariableBroadcast(channel) });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut core::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    let committed = matches!(event, XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT);
    // A prepared transaction's releases are committed later by COMMIT PREPARED, perhaps in
    // another session, which broadcasts nothing: waiters look again within RECHECK_MS. Its
    // wake-ups must not go to this session's next commit.
    let ended = matches!(
        event,
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE
    );
    if committed || ended {
        let mut released = RELEASED.with_borrow_mut(std::mem::take);
        if committed {
            released.sort_unstable();
            released.dedup();
            released
                .into_iter()
                .for_each(|channel| unsafe { pg_sys::ConditionVariableBroadcast(channel) });
        }
    }
}

/// The channel that waiting acquires of `key` sleep on; None when not preloaded.
pub fn channel(key: LockKey) -> Option<*mut pg_sys::ConditionVariable> {
    let channels = unsafe { CHANNEL_ARRAY };
    let index = (key.ns as u32).wrapping_mul(31).wrapping_add(key.id as u32) as usize;
    (!channels.is_null()).then(|| unsafe { channels.add(index % CHANNELS) })
}

/// Wakes the waiters of `key` when this transaction commits.
pub fn wake_at_commit(key: LockKey) {
    if let Some(channel) = channel(key) {
        RELEASED.with_borrow_mut(|channels| channels.push(channel));
    }
}

/// Wakes the waiters of `key`'s permits once this transaction's locks are released.
pub fn wake_at_lock_release(key: LockKey) {
    if let Some(channel) = channel(key) {
        PERMITS_HELD.with_borrow_mut(|channels| channels.push(channel));
    }
}

/// Wakes the waiters of `key` now.
pub fn wake_now(key: LockKey) {
    if let Some(channel) = channel(key) {
        unsafe { pg_sys::ConditionVariableBroadcast(channel) };
    }
}

/// Without the shared condition variables (not preloaded), a waiter looks again this often
/// (ms).
pub const UNPRELOADED_RECHECK_MS: i64 = 100;

/// Sleeps up to `millis` (at least 1) on `channel`, prepared by the caller with
/// ConditionVariablePrepareToSleep before it looked, or, without one, on the latch for at
/// most UNPRELOADED_RECHECK_MS; then checks for interrupts.
pub fn sleep(channel: Option<*mut pg_sys::ConditionVariable>, millis: i64, wait_event: u32) {
    match channel {
        Some(channel) => unsafe {
            pg_sys::ConditionVariableTimedSleep(channel, millis.max(1), wait_event);
        },
        None => unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                millis.clamp(1, UNPRELOADED_RECHECK_MS),
                wait_event,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        },
    }
    pgrx::check_for_interrupts!();
}
