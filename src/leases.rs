//! Session-scoped fenced leases and leader election. The lock is the session-level advisory
//! lock (the one `pg_advisory_lock(ns, id)` takes) and lives as long as the session, across
//! transactions; its token is the leader's term. Holding is a set, not a count: acquiring a
//! held key returns the same token, and one release frees it.

use crate::errors::warn_not_held;
use crate::grants::{self, Scope};
use crate::locking::{current_grant, key_of, try_acquire, LockKey};
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

/// Releases the session lock on `key` and tells listeners (at commit, as NOTIFY does).
fn release(key: LockKey) {
    let payload = CString::new(format!("{}:{}", key.ns, key.id)).expect("digits only");
    unsafe {
        pg_sys::LockRelease(&key.locktag(), pg_sys::ExclusiveLock as _, true);
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            Async_Notify(RELEASE_CHANNEL.as_ptr(), payload.as_ptr())
        });
    }
}

crate::locking::acquire_functions! {
    scope: Scope::Session,
    acquire: "acquire_fenced_session",
    try_acquire: "try_acquire_fenced_session",
    functions: [acquire_fenced_session, acquire_fenced_session_within,
                try_acquire_fenced_session, acquire_fenced_session_named,
                acquire_fenced_session_named_within, try_acquire_fenced_session_named],
}

/// Try to become the leader for (ns, id): the term (a token), or NULL when another session
/// leads.
#[pg_extern(volatile, parallel_unsafe)]
fn become_leader(
    ns: Option<i32>,
    id: Option<i32>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    try_acquire(
        fcinfo,
        "become_leader",
        key_of("become_leader", ns, id),
        Scope::Session,
    )
}

/// Releases this session's lock on (ns, id): true, or false with a WARNING when this session
/// does not hold it at session scope.
#[pg_extern(volatile, parallel_unsafe)]
fn release_fenced(ns: Option<i32>, id: Option<i32>) -> bool {
    let key = key_of("release_fenced", ns, id);
    match current_grant(key) {
        Some((Scope::Session, _)) => {
            grants::forget_session(key);
            release(key);
            true
        }
        held => {
            warn_not_held(key, held.is_some());
            false
        }
    }
}

/// Releases every session-scoped fenced lock of this session; how many.
#[pg_extern(volatile, parallel_unsafe)]
fn release_all_fenced() -> i32 {
    let still_held: Vec<LockKey> = grants::forget_all_sessions()
        .into_iter()
        .filter(|key| crate::locking::held_by_me(&key.locktag()))
        .collect();
    still_held.iter().for_each(|&key| release(key));
    still_held.len() as i32
}

/// The token this session holds for (ns, id), at either scope, or NULL. Parallel restricted:
/// a worker process has no grants of its own.
#[pg_extern(volatile, parallel_restricted)]
fn current_fence(ns: Option<i32>, id: Option<i32>) -> Option<i64> {
    current_grant(key_of("current_fence", ns, id)).map(|(_, token)| token)
}

/// The session holding (ns, id): pid, application_name, client_addr, and (from the grants
/// table, when fenced_lock is preloaded; NULL otherwise) its term and since when.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted)]
fn current_leader(
    ns: Option<i32>,
    id: Option<i32>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(application_name, Option<String>),
        name!(client_addr, Option<pgrx::Inet>),
        name!(term, Option<i64>),
        name!(since, Option<TimestampWithTimeZone>),
    ),
> {
    let key = key_of("current_leader", ns, id);
    let view = crate::extension::qualified(fcinfo, c"fenced_locks");
    let rows = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT pid, application_name, client_addr::text, token, acquired_at \
                       FROM {view} WHERE ns = $1 AND id = $2 AND granted"
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
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|error| panic!("reading fenced_locks failed: {error}"));
    TableIterator::new(rows)
}
