//! The wake-up channels of waiting acquires: condition variables in shared memory (when
//! preloaded), a key mapped to one of them. A release is broadcast when its transaction
//! commits, once waiters can see it (a wake-up before that would find the lease still held).

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
}

pub fn register_callback() {
    unsafe { pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut()) };
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
