//! Operators' tools: the rows of the fenced_locks view, and force_release, which frees a key
//! held by other sessions by terminating them.

use crate::errors::{FencedError, OrRaise};
use crate::locking::key_forms;
use crate::shared_grants::GrantIndex;
use crate::types::{LockKey, Lockable, Mode, PermitTag, Scope};
use pgrx::pg_sys;
use pgrx::prelude::*;
use rustc_hash::FxHashSet;

// Terminates the backend(s) holding the key, the only way to free another session's lock,
// and returns how many. Runs with the caller's rights: it needs what pg_terminate_backend
// needs (superuser, or pg_signal_backend / the holder's role). Refuses the caller's own
// backend.
key_forms! {
    names: [force_release, force_release_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [],
    returns: i32,
    |fcinfo, _function, keyed| terminate_holders(fcinfo, keyed.key),
}

fn terminate_holders(fcinfo: pg_sys::FunctionCallInfo, key: LockKey) -> i32 {
    let view = crate::extension::qualified(fcinfo, c"fenced_locks");
    let holders: Vec<i32> = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT DISTINCT pid FROM {view} \
                      WHERE ns OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.=) $2 \
                        AND granted AND pid IS NOT NULL \
                        AND mode OPERATOR(pg_catalog.<>) 'permit'"
                ),
                None,
                &[key.ns.into(), key.id.into()],
            )?
            .map(|row| row.get::<i32>(1).map(Option::unwrap_or_default))
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(|error: pgrx::spi::Error| ("reading fenced_locks", error))
    .or_raise();
    if holders.contains(&unsafe { pg_sys::MyProcPid }) {
        FencedError::ForceReleaseOwnLock { key }.raise();
    }
    // pg_terminate_backend checks the caller's rights (42501) and, with a timeout, waits for
    // the backend to exit, so the key is free when this returns.
    let terminated = holders
        .into_iter()
        .filter(|&pid| {
            Spi::get_one_with_args::<bool>(
                "SELECT pg_catalog.pg_terminate_backend($1, 5000)",
                &[pid.into()],
            )
            .ok()
            .flatten()
            .unwrap_or(false)
        })
        .count() as i32;
    crate::stats::count(
        key.ns,
        crate::stats::Count::ForceReleases,
        terminated.into(),
    );
    terminated
}

/// A row of fenced_lock_rows() (the fenced_locks view without its session's columns).
type LockRow = (
    i32,
    Option<String>,
    i32,
    Option<i32>,
    bool,
    Option<i64>,
    Option<&'static str>,
    Option<String>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    &'static str,
    Option<i32>,
);

/// The rows of the fenced_locks view, without the session's columns (the view joins
/// pg_stat_activity by pid): one per two-int4 advisory lock of this database, held or awaited,
/// in either mode, and one per permit held or awaited, with its fenced grant. One copy of the
/// lock table, read in place, and an index of the grants by backend and lock (a grant's texts
/// read from its slot only for its row): every read costs O(locks + grants) whatever the query
/// filters on (0.1.0's SQL join let the planner nest loops: 9 s for `WHERE ns = X` at 10,000
/// locks), and the rows are made as the scan asks for them. A session grant shows only while
/// its backend holds the session sentinel (locking.rs): after pg_advisory_unlock_all or
/// DISCARD ALL its token is unknown (NULL), never stale. A permit's waiters are those in its
/// key's line and the head of the line (which holds the line's lock and sleeps until a permit
/// comes free).
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted, schema = "fenced_lock_internal")]
fn fenced_lock_rows() -> TableIterator<
    'static,
    (
        name!(ns, i32),
        name!(key, Option<String>),
        name!(id, i32),
        name!(pid, Option<i32>),
        name!(granted, bool),
        name!(token, Option<i64>),
        name!(scope, Option<&'static str>),
        name!(owner, Option<String>),
        name!(acquired_at, Option<TimestampWithTimeZone>),
        name!(wait_started, Option<TimestampWithTimeZone>),
        name!(mode, &'static str),
        name!(slot, Option<i32>),
    ),
> {
    // pgrx runs a set-returning function's first call in the memory context that lasts as
    // long as its scan, which the iterator below does not outlive.
    let locks: &'static [pg_sys::LockInstanceData] = unsafe { crate::locking::lock_table() };
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let sessions_intact: FxHashSet<i32> = locks
        .iter()
        .filter(|lock| {
            lock.holdMask != 0
                && crate::locking::same_tag(
                    &lock.locktag,
                    &crate::locking::session_sentinel_of(lock.pid),
                )
        })
        .map(|lock| lock.pid)
        .collect();
    let mut grants =
        GrantIndex::new(|pid, scope| scope == Scope::Transaction || sessions_intact.contains(&pid));
    TableIterator::new(
        locks
            .iter()
            .filter(move |lock| lock.locktag.locktag_field1 == database)
            .flat_map(move |lock| rows_of(lock, &mut grants).into_iter().flatten()),
    )
}

/// The rows of one lock of this database: its holder's (with the grant, taken from `grants`)
/// and its waiter's; none for a lock fenced_lock does not take.
fn rows_of(lock: &pg_sys::LockInstanceData, grants: &mut GrantIndex) -> [Option<LockRow>; 2] {
    let tag = &lock.locktag;
    let key = LockKey {
        ns: tag.locktag_field2 as i32,
        id: tag.locktag_field3 as i32,
    };
    // What the lock is: the key's advisory lock (held in either mode), a permit slot, or a
    // permit line (its holder is the head of the line, still waiting).
    let (lockable, head_of_line) = match PermitTag::of(tag) {
        Some(PermitTag::Slot(key, slot)) => (Lockable { key, permit: slot }, false),
        Some(PermitTag::Queue(key)) => (Lockable::advisory(key), true),
        None if tag.locktag_type == pg_sys::LockTagType::LOCKTAG_ADVISORY as u8
            && tag.locktag_field4 == 2 =>
        {
            (Lockable::advisory(key), false)
        }
        None => return [None, None],
    };
    let bit = |mode: u32| 1 << mode;
    let permit = lockable.permit != 0 || head_of_line;
    let mode_of = |mask: i32| match () {
        _ if permit => "permit",
        _ if mask & bit(pg_sys::ExclusiveLock) != 0 => Mode::Exclusive.name(),
        _ => Mode::Shared.name(),
    };
    let slot = (lockable.permit != 0).then_some(i32::from(lockable.permit));
    // pg_locks shows a prepared transaction's locks without a PID.
    let pid = (lock.pid != 0).then_some(lock.pid);
    let waiting = |wait_started: Option<TimestampWithTimeZone>, mode: &'static str| {
        (
            key.ns,
            None,
            key.id,
            pid,
            false,
            None,
            None,
            None,
            None,
            wait_started,
            mode,
            None,
        )
    };
    let held = match () {
        _ if lock.holdMask == 0 => None,
        _ if head_of_line => Some(waiting(None, mode_of(0))),
        _ => {
            let grant = grants.take(lock.pid, lockable);
            let mode = match &grant {
                Some(grant) if !permit => grant.mode.name(),
                _ => mode_of(lock.holdMask),
            };
            let (label, token, scope, owner, acquired_at) = match grant {
                Some(grant) => (
                    grant.label,
                    Some(grant.token),
                    Some(grant.scope.name()),
                    grant.owner,
                    Some(grant.acquired_at),
                ),
                None => (None, None, None, None, None),
            };
            Some((
                key.ns,
                label,
                key.id,
                pid,
                true,
                token,
                scope,
                owner,
                acquired_at,
                None,
                mode,
                slot,
            ))
        }
    };
    let awaited = (lock.waitLockMode != pg_sys::NoLock as i32).then(|| {
        let wait_started = (lock.waitStart != 0).then(|| unsafe {
            TimestampWithTimeZone::from_datum(pg_sys::Datum::from(lock.waitStart), false)
                .expect("a timestamp")
        });
        waiting(wait_started, mode_of(bit(lock.waitLockMode as u32)))
    });
    [held, awaited]
}
