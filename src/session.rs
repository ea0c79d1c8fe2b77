//! Session-scoped fenced locks, the leader election of the API. The lock is the session-level
//! advisory lock (the one `pg_advisory_lock(ns, id)` takes) and lives as long as the session,
//! across transactions; its token is the leader's term. Holding is a set, not a count: one
//! release frees it. Acquiring a held key returns the same token only to the owner it was
//! taken for: a server session behind a pooler serves many clients (`leases` has locks that
//! work there).

use crate::errors::{refuse_in_parallel_mode, warn_held_for_another_owner, warn_not_held};
use crate::grants;
use crate::locking::{acquire_waiting, current_grant, key_forms, try_acquire, Grant};
use crate::locking::{mode_argument, optional_owner};
use crate::types::{LockKey, Lockable, Mode, Scope};
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CString;

/// Followers can LISTEN on this channel; the payload of each release is "ns:id".
const RELEASE_CHANNEL: &core::ffi::CStr = c"fenced_lock";

unsafe extern "C-unwind" {
    // Exported by PostgreSQL (commands/async.h), not bound by pgrx: NOTIFY without SQL.
    fn Async_Notify(channel: *const core::ffi::c_char, payload: *const core::ffi::c_char);
}

/// Releases a session grant's lock: a permit's (which wakes its line), or the key's lock in
/// `mode`, telling listeners (at commit, as NOTIFY does).
fn release(lock: Lockable, mode: Mode) {
    if lock.permit != 0 {
        return crate::permits::release(lock);
    }
    let key = lock.key;
    let payload = CString::new(format!("{}:{}", key.ns, key.id)).expect("digits only");
    unsafe {
        pg_sys::LockRelease(&key.locktag(), mode.lockmode(), true);
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            Async_Notify(RELEASE_CHANNEL.as_ptr(), payload.as_ptr())
        });
    }
}

// The session-level lock (pg_advisory_lock's, or with `shared` pg_advisory_lock_shared's),
// for `owner` (a client-chosen id) or for none: held across transactions until
// release_fenced or the session's end. A held grant's token goes back only to a call naming
// its owner: behind a pooler this session may serve another client.
key_forms! {
    names: [acquire_fenced_session, acquire_fenced_session_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [
        timeout: default!(Option<Interval>, "NULL"),
        owner: default!(Option<&str>, "NULL"),
        shared: default!(Option<bool>, false),
    ],
    returns: i64,
    |fcinfo, function, keyed| {
        let grant = Grant::Session { owner: optional_owner(owner, function) };
        let mode = mode_argument(shared, function);
        acquire_waiting(fcinfo, function, keyed, timeout, grant, mode)
    },
}

// Leader election: the term (a token), or NULL when another session leads (or this one, for
// another owner).
key_forms! {
    names: [try_acquire_fenced_session, try_acquire_fenced_session_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [
        owner: default!(Option<&str>, "NULL"),
        shared: default!(Option<bool>, false),
    ],
    returns: Option<i64>,
    |fcinfo, function, keyed| {
        let grant = Grant::Session { owner: optional_owner(owner, function) };
        let mode = mode_argument(shared, function);
        try_acquire(fcinfo, function, keyed, grant, mode)
    },
}

/// Releases this session's grant on `key` if it was taken for `owner`: true, or false with a
/// WARNING when this session does not hold it at session scope, or holds it for another owner.
fn release_for(function: &str, key: LockKey, owner: Option<&str>) -> bool {
    refuse_in_parallel_mode(function);
    let lock = Lockable::advisory(key);
    match current_grant(lock) {
        Some(held) if held.scope == Scope::Session => {
            let held_for = grants::session_owner(lock);
            if held_for.as_deref() != owner {
                warn_held_for_another_owner(lock, held_for.as_deref());
                return false;
            }
            grants::forget_session(lock);
            release(lock, held.mode);
            true
        }
        held => {
            warn_not_held(lock, held.is_some());
            false
        }
    }
}

// Releases this session's lock on the key, taken for `owner` (NULL: without one): true, or
// false with a WARNING when it is not held so.
key_forms! {
    names: [release_fenced, release_fenced_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [owner: default!(Option<&str>, "NULL"),],
    returns: bool,
    |_fcinfo, function, keyed| release_for(function, keyed.key, optional_owner(owner, function)),
}

/// Releases this session's session-scoped fenced locks taken for `owner` (None: without one);
/// how many. Behind a pooler the session may hold other clients' locks, taken for their owners.
fn release_all_for(function: &str, owner: Option<&str>) -> i32 {
    refuse_in_parallel_mode(function);
    let still_held: Vec<(Lockable, Mode)> = grants::forget_sessions_of(owner)
        .into_iter()
        .filter(|(lock, mode)| crate::compat::lock_held_by_me(&lock.locktag(), mode.lockmode()))
        .collect();
    still_held
        .iter()
        .for_each(|&(lock, mode)| release(lock, mode));
    still_held.len() as i32
}

/// Releases every session-scoped fenced lock of this session taken for `owner` (NULL:
/// without one); how many.
#[pg_extern(volatile, parallel_unsafe)]
fn release_all_fenced(owner: default!(Option<&str>, "NULL")) -> i32 {
    let function = "release_all_fenced";
    release_all_for(function, optional_owner(owner, function))
}

/// The token of this session's grant on `key` as `owner` may see it: a transaction grant, or a
/// session grant taken for that very owner (None: without one). Behind a pooler, a session
/// lock taken for another client's owner is not this caller's.
fn fence_for(function: &str, key: LockKey, owner: Option<&str>) -> Option<i64> {
    refuse_in_parallel_mode(function);
    let lock = Lockable::advisory(key);
    let held = current_grant(lock)?;
    match held.scope {
        Scope::Transaction => owner.is_none().then_some(held.token),
        Scope::Session => (grants::session_owner(lock).as_deref() == owner).then_some(held.token),
    }
}

// The token this session holds for the key: at transaction scope, or at session scope taken
// for `owner` (NULL: without one); else NULL. Parallel restricted, and refused during a
// parallel operation: a worker process has no grants of its own, and a NULL there would be a
// lie.
key_forms! {
    names: [current_fence, current_fence_named],
    attributes: [volatile, parallel_restricted],
    arguments: [owner: default!(Option<&str>, "NULL"),],
    returns: Option<i64>,
    |_fcinfo, function, keyed| fence_for(function, keyed.key, optional_owner(owner, function)),
}
