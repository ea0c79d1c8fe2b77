//! PostgreSQL functions called without pgrx's guard, for the acquire and lease paths.
//!
//! pgrx wraps every call into PostgreSQL in a guard (a sigsetjmp, and the error stack and
//! memory context saved and restored), so that an ERROR raised inside unwinds through Rust
//! instead of jumping over it. The guard costs about 125 instructions a call: a third of what
//! `acquire_fenced` added to the bare advisory lock. These functions only read the backend's
//! own state (or the clock) and raise no ERROR, so they need no guard. The functions that can
//! raise keep theirs; `guarded` runs a few of them, bound by a module of their own, under one.
//!
//! A leaf: it imports nothing from this crate. The signatures are pgrx's own bindings', so
//! both declarations stay interchangeable.

use pgrx::pg_sys;

#[allow(non_snake_case)]
mod raw {
    use pgrx::pg_sys::{Oid, SubTransactionId, TimestampTz};

    unsafe extern "C-unwind" {
        pub fn RecoveryInProgress() -> bool;
        pub fn IsInParallelMode() -> bool;
        pub fn IsTransactionBlock() -> bool;
        pub fn GetCurrentTimestamp() -> TimestampTz;
        pub fn GetCurrentSubTransactionId() -> SubTransactionId;
        pub fn GetUserId() -> Oid;
    }
}

/// Whether this server is a hot standby (or still recovering).
pub fn recovery_in_progress() -> bool {
    unsafe { raw::RecoveryInProgress() }
}

/// Whether a parallel operation is under way.
pub fn in_parallel_mode() -> bool {
    unsafe { raw::IsInParallelMode() }
}

/// Whether the statement runs inside a transaction block (an implicit one too).
pub fn in_transaction_block() -> bool {
    unsafe { raw::IsTransactionBlock() }
}

/// The clock, as `clock_timestamp()` reads it.
pub fn now() -> pg_sys::TimestampTz {
    unsafe { raw::GetCurrentTimestamp() }
}

pub fn current_subtransaction() -> pg_sys::SubTransactionId {
    unsafe { raw::GetCurrentSubTransactionId() }
}

/// The current role (the caller's, or the owner's inside a SECURITY DEFINER function).
pub fn current_role() -> pg_sys::Oid {
    unsafe { raw::GetUserId() }
}

/// Runs `calls` (calls into PostgreSQL through unguarded bindings) under one guard: an ERROR
/// among them unwinds through Rust as pgrx's own guard makes it.
///
/// # Safety
/// `calls` must hold nothing that needs dropping and must not panic (pgrx's rules for
/// `pg_guard_ffi_boundary`).
pub unsafe fn guarded<R>(calls: impl FnOnce() -> R) -> R {
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(calls) }
}
