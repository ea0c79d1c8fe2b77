//! Session-scoped fenced locks and leader election on them. The lock is the session-level
//! advisory lock (the one `pg_advisory_lock(ns, id)` takes) and lives as long as the session,
//! across transactions; its token is the leader's term. Holding is a set, not a count: one
//! release frees it. Acquiring a held key returns the same token only to the owner it was
//! taken for: a server session behind a pooler serves many clients (`leases` has locks that
//! work there).

use crate::errors::{refuse_in_parallel_mode, warn_held_for_another_owner, warn_not_held, OrRaise};
use crate::grants;
use crate::locking::{current_grant, key_forms, try_acquire, Grant};
use crate::types::{LockKey, Lockable, Mode, Scope};
use pgrx::datum::TimestampWithTimeZone;
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

crate::locking::acquire_functions! {
    grant: |_function| Grant::Session { owner: None },
    mode: Mode::Exclusive,
    arguments: (),
    wait: ["acquire_fenced_session", "acquire_fenced_session_named",
           "acquire_fenced_session_named_bigint"]
        as [acquire_fenced_session, acquire_fenced_session_named,
            acquire_fenced_session_named_bigint],
    within: [acquire_fenced_session_within, acquire_fenced_session_named_within,
             acquire_fenced_session_named_bigint_within],
    try: ["try_acquire_fenced_session", "try_acquire_fenced_session_named",
          "try_acquire_fenced_session_named_bigint"]
        as [try_acquire_fenced_session, try_acquire_fenced_session_named,
            try_acquire_fenced_session_named_bigint],
}

// The same, taken for an owner (a client-chosen id): only that owner gets a held grant's token
// back. The waiting forms have a name of their own: beside `timeout interval`, a third `text`
// argument would catch a driver's untyped call meant for the timeout.
crate::locking::acquire_functions! {
    grant: |function| Grant::Session { owner: Some(crate::locking::owner_argument(owner, function)) },
    mode: Mode::Exclusive,
    arguments: (owner: Option<&str>),
    wait: ["acquire_fenced_session_owned", "acquire_fenced_session_owned_named",
           "acquire_fenced_session_owned_named_bigint"]
        as [acquire_fenced_session_owned, acquire_fenced_session_owned_named,
            acquire_fenced_session_owned_named_bigint],
    within: [acquire_fenced_session_owned_within, acquire_fenced_session_owned_named_within,
             acquire_fenced_session_owned_named_bigint_within],
    try: ["try_acquire_fenced_session", "try_acquire_fenced_session_named",
          "try_acquire_fenced_session_named_bigint"]
        as [try_acquire_fenced_session_owner, try_acquire_fenced_session_owner_named,
            try_acquire_fenced_session_owner_named_bigint],
}

// The shared lock at session scope (pg_advisory_lock_shared's), without an owner and for one;
// release_fenced releases it as it does the exclusive one.
crate::locking::acquire_functions! {
    grant: |_function| Grant::Session { owner: None },
    mode: Mode::Shared,
    arguments: (),
    wait: ["acquire_fenced_shared_session", "acquire_fenced_shared_session_named",
           "acquire_fenced_shared_session_named_bigint"]
        as [acquire_fenced_shared_session, acquire_fenced_shared_session_named,
            acquire_fenced_shared_session_named_bigint],
    within: [acquire_fenced_shared_session_within, acquire_fenced_shared_session_named_within,
             acquire_fenced_shared_session_named_bigint_within],
    try: ["try_acquire_fenced_shared_session", "try_acquire_fenced_shared_session_named",
          "try_acquire_fenced_shared_session_named_bigint"]
        as [try_acquire_fenced_shared_session, try_acquire_fenced_shared_session_named,
            try_acquire_fenced_shared_session_named_bigint],
}

crate::locking::acquire_functions! {
    grant: |function| Grant::Session { owner: Some(crate::locking::owner_argument(owner, function)) },
    mode: Mode::Shared,
    arguments: (owner: Option<&str>),
    wait: ["acquire_fenced_shared_session_owned", "acquire_fenced_shared_session_owned_named",
           "acquire_fenced_shared_session_owned_named_bigint"]
        as [acquire_fenced_shared_session_owned, acquire_fenced_shared_session_owned_named,
            acquire_fenced_shared_session_owned_named_bigint],
    within: [acquire_fenced_shared_session_owned_within,
             acquire_fenced_shared_session_owned_named_within,
             acquire_fenced_shared_session_owned_named_bigint_within],
    try: ["try_acquire_fenced_shared_session", "try_acquire_fenced_shared_session_named",
          "try_acquire_fenced_shared_session_named_bigint"]
        as [try_acquire_fenced_shared_session_owner, try_acquire_fenced_shared_session_owner_named,
            try_acquire_fenced_shared_session_owner_named_bigint],
}

// Try to become the leader for the key: the term (a token), or NULL when another session
// leads (or this one, for another owner).
key_forms! {
    names: ["become_leader", "become_leader_named", "become_leader_named_bigint"],
    rust: [become_leader, become_leader_named, become_leader_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (),
    returns: Option<i64>,
    |fcinfo, function, keyed| become_leader_for(fcinfo, function, keyed, None),
}

key_forms! {
    names: ["become_leader", "become_leader_named", "become_leader_named_bigint"],
    rust: [become_leader_owner, become_leader_owner_named, become_leader_owner_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (owner: Option<&str>),
    returns: Option<i64>,
    |fcinfo, function, keyed| {
        let owner = Some(crate::locking::owner_argument(owner, function));
        become_leader_for(fcinfo, function, keyed, owner)
    },
}

/// The term if this session leads (a new term counted in fenced_lock_stats), else None. A
/// session that leads without an owner gets its term back when it asks again: a leader polls
/// with the call that made it leader, and NULL would tell it another session leads.
fn become_leader_for(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: crate::locking::Keyed,
    owner: Option<&str>,
) -> Option<i64> {
    let key = keyed.key;
    let lock = Lockable::advisory(key);
    let held = current_grant(lock);
    if let Some(held) = &held {
        let ownerless_leader = held.scope == Scope::Session
            && held.mode == Mode::Exclusive
            && owner.is_none()
            && grants::session_owner(lock).is_none();
        if ownerless_leader {
            return Some(held.token);
        }
    }
    let leading = held.is_some();
    let term = try_acquire(
        fcinfo,
        function,
        keyed,
        Grant::Session { owner },
        Mode::Exclusive,
    );
    if term.is_some() && !leading {
        crate::stats::one(key, crate::stats::Count::LeaderTerms);
    }
    term
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

// Releases this session's lock on the key, taken without an owner (or, with `owner`, for
// that owner): true, or false with a WARNING when it is not held so.
key_forms! {
    names: ["release_fenced", "release_fenced_named", "release_fenced_named_bigint"],
    rust: [release_fenced, release_fenced_named, release_fenced_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (),
    returns: bool,
    |_fcinfo, function, keyed| release_for(function, keyed.key, None),
}

key_forms! {
    names: ["release_fenced", "release_fenced_named", "release_fenced_named_bigint"],
    rust: [release_fenced_owner, release_fenced_owner_named, release_fenced_owner_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (owner: Option<&str>),
    returns: bool,
    |_fcinfo, function, keyed| {
        release_for(function, keyed.key, Some(crate::locking::owner_argument(owner, function)))
    },
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

/// Releases every session-scoped fenced lock of this session taken without an owner; how many.
#[pg_extern(volatile, parallel_unsafe)]
fn release_all_fenced() -> i32 {
    release_all_for("release_all_fenced", None)
}

/// Releases every session-scoped fenced lock of this session taken for `owner`; how many.
#[pg_extern(name = "release_all_fenced", volatile, parallel_unsafe)]
fn release_all_fenced_owner(owner: Option<&str>) -> i32 {
    let owner = crate::locking::owner_argument(owner, "release_all_fenced");
    release_all_for("release_all_fenced", Some(owner))
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
// without an owner; else NULL. Parallel restricted, and refused during a parallel operation: a
// worker process has no grants of its own, and a NULL there would be a lie.
key_forms! {
    names: ["current_fence", "current_fence_named", "current_fence_named_bigint"],
    rust: [current_fence, current_fence_named, current_fence_named_bigint],
    attributes: [volatile, parallel_restricted],
    arguments: (),
    returns: Option<i64>,
    |_fcinfo, function, keyed| fence_for(function, keyed.key, None),
}

// The token of this session's session-scoped grant on the key taken for `owner`, or NULL.
key_forms! {
    names: ["current_fence", "current_fence_named", "current_fence_named_bigint"],
    rust: [current_fence_owner, current_fence_owner_named, current_fence_owner_named_bigint],
    attributes: [volatile, parallel_restricted],
    arguments: (owner: Option<&str>),
    returns: Option<i64>,
    |_fcinfo, function, keyed| {
        let owner = crate::locking::owner_argument(owner, function);
        fence_for(function, keyed.key, Some(owner))
    },
}

/// pid, application_name, client_addr, term, since, owner.
type LeaderRow = (
    i32,
    Option<String>,
    Option<pgrx::Inet>,
    Option<i64>,
    Option<TimestampWithTimeZone>,
    Option<String>,
);

// The session holding the key: pid, application_name, client_addr, and (from the grants
// table, when fenced_lock is preloaded; NULL otherwise) its term, since when, and the owner
// it was taken for.
key_forms! {
    names: ["current_leader", "current_leader_named", "current_leader_named_bigint"],
    rust: [current_leader, current_leader_named, current_leader_named_bigint],
    attributes: [volatile, parallel_restricted],
    arguments: (),
    returns: TableIterator<
        'static,
        (
            name!(pid, i32),
            name!(application_name, Option<String>),
            name!(client_addr, Option<pgrx::Inet>),
            name!(term, Option<i64>),
            name!(since, Option<TimestampWithTimeZone>),
            name!(owner, Option<String>),
        ),
    >,
    |fcinfo, _function, keyed| TableIterator::new(leader_rows(fcinfo, keyed.key)),
}

fn leader_rows(fcinfo: pg_sys::FunctionCallInfo, key: LockKey) -> Vec<LeaderRow> {
    let view = crate::extension::qualified(fcinfo, c"fenced_locks");
    Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT pid, application_name, client_addr::pg_catalog.text, token, acquired_at, \
                            owner \
                       FROM {view} WHERE ns OPERATOR(pg_catalog.=) $1 \
                        AND id OPERATOR(pg_catalog.=) $2 AND granted \
                        AND mode OPERATOR(pg_catalog.=) 'exclusive'"
                ),
                None,
                &[key.ns.into(), key.id.into()],
            )?
            .map(|row| {
                Ok((
                    row.get::<i32>(1)?.unwrap_or_default(),
                    row.get::<String>(2)?,
                    row.get::<String>(3)?.map(pgrx::Inet),
                    row.get::<i64>(4)?,
                    row.get::<TimestampWithTimeZone>(5)?,
                    row.get::<String>(6)?,
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .map_err(|error: pgrx::spi::Error| ("reading fenced_locks", error))
    .or_raise()
}
