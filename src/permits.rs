//! Fenced counting semaphores: a key has `permits` slots (1..=permits), each a lock of its own
//! (a user lock, `types::LockKey::permit_tag`), and a holder gets one slot and a fresh token,
//! drawn after the slot's grant, so it is above every earlier holder's of that slot (and of
//! every key). The number of permits is not stored: each call says how many slots it may
//! take, so a smaller number takes effect at once for new grants while holders of higher
//! slots keep theirs until they release.
//!
//! Waiting acquires line up on the key's queue lock in the lock manager (granted in arrival
//! order, deadlock-checked, bounded by lock_timeout); the one at the head of the line holds it
//! and sleeps on the key's wake-up channel (`wakeups`) until a permit of the key is released,
//! then looks at the slots again. A try finds the line busy when anyone waits in it, so it
//! never takes a slot from under the head of the line.

use crate::errors::FencedError;
use crate::errors::{refuse_in_parallel_mode, warn_held_for_another_owner, warn_not_held};
use crate::grants;
use crate::locking::{
    current_grant, grant_token, key_forms, optional_owner, permit_argument, refuse_unusable_call,
    wait_argument,
};
use crate::locking::{lock_table, same_tag, take_session_sentinel, try_lock_exclusive};
use crate::locking::{wait_in_line, Grant, Keyed, Wait};
use crate::stats::{self, Count};
use crate::types::{LockKey, Lockable, Mode, NewGrant, Scope};
use crate::wakeups;
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The head of a key's line looks at its slots again at least this often (ms): a permit
/// released without a wake-up (pg_advisory_unlock_all, DISCARD ALL, COMMIT PREPARED in
/// another session) is found within it.
const RECHECK_MS: i64 = 1000;

/// A permit's row: its slot and token.
type PermitRow = (i32, i64);

/// Takes a permit of `keyed` as `grant` asks: its slot and token; None only for `Wait::Never`
/// (or, for `Never`, when no permit was free or others wait in line).
fn acquire(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: Keyed,
    permits: Option<i32>,
    wait: Wait,
    grant: Grant,
) -> Option<PermitRow> {
    let permits = permit_argument(permits, function, "permits");
    let (key, scope, owner) = (keyed.key, grant.scope(), grant.owner());
    refuse_unusable_call(function, key, scope);
    // One permit of a key per transaction, or per session and owner: taken again, it is the
    // same slot and token (its lock still held: a session lock can be dropped in bulk). A
    // session permit taken without an owner goes back to no one (as a session lock taken
    // without one): behind a pooler the caller may be another client, who takes a slot of
    // its own.
    let returnable = scope == Scope::Transaction || owner.is_some();
    if let Some((slot, token)) = grants::held_permit(key, scope, owner).filter(|_| returnable) {
        if current_grant(Lockable { key, permit: slot }).is_some() {
            return Some((slot.into(), token));
        }
    }
    let sentinel = take_session_sentinel(scope);
    let Some(slot) = take_slot(key, permits, wait, scope) else {
        sentinel.give_back();
        return None;
    };
    let new = NewGrant {
        lock: Lockable { key, permit: slot },
        mode: Mode::Exclusive,
        scope,
        label: keyed.label.as_deref(),
        owner,
    };
    let token = grant_token(fcinfo, new);
    match scope {
        Scope::Transaction => wakeups::wake_at_lock_release(key),
        Scope::Session => wake_at_exit(),
    }
    Some((slot.into(), token))
}

/// A backend that exits holding session permits wakes their keys' lines once PostgreSQL has
/// released its locks (an on_shmem_exit callback runs after the session locks are gone,
/// before the backend leaves its PGPROC).
fn wake_at_exit() {
    thread_local! {
        static REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !REGISTERED.replace(true) {
        unsafe { pg_sys::on_shmem_exit(Some(on_backend_exit), pg_sys::Datum::from(0)) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_backend_exit(_code: i32, _arg: pg_sys::Datum) {
    grants::permit_keys()
        .into_iter()
        .for_each(wakeups::wake_now);
}

/// The first free slot of `key` among 1..=permits, taken at `scope`; the slots this backend
/// holds already (for another owner, or at the other scope) are not free to it, though the
/// lock manager would grant them again. Held as the lock manager says: a session permit that
/// DISCARD ALL or pg_advisory_unlock_all released is free again (and forgotten).
fn try_slots(key: LockKey, permits: u16, scope: Scope) -> Option<u16> {
    let own = own_slots(key);
    (1..=permits)
        .filter(|slot| !own.contains(slot))
        .find(|&slot| try_lock_exclusive(&key.permit_tag(slot), scope == Scope::Session))
}

/// The slots of `key` this backend holds, as the lock manager says.
fn own_slots(key: LockKey) -> Vec<u16> {
    (grants::held_permit_slots(key).into_iter())
        .filter(|&slot| current_grant(Lockable { key, permit: slot }).is_some())
        .collect()
}

/// Whether this backend, waiting for a permit of `key`, waits for itself: a holder of one of
/// the `permits` slots waits in the lock manager, directly or through other backends, for a
/// lock this backend holds. The lock manager's own detector cannot see the cycle, as the head
/// of a permit line sleeps outside it.
fn permit_deadlock(key: LockKey, permits: u16) -> Option<Vec<i32>> {
    let me = unsafe { pg_sys::MyProcPid };
    // Safety: nothing allocated in the context outlives it (the results are Rust vectors).
    let mut context = pgrx::PgMemoryContexts::new("fenced_lock permit deadlock check");
    unsafe {
        context.switch_to(|_| {
            let tags: Vec<pg_sys::LOCKTAG> =
                (1..=permits).map(|slot| key.permit_tag(slot)).collect();
            // The copy is read before the context goes.
            let mut holders: Vec<i32> = lock_table()
                .iter()
                .filter(|lock| {
                    lock.holdMask != 0 && tags.iter().any(|tag| same_tag(&lock.locktag, tag))
                })
                .map(|lock| lock.pid)
                .filter(|&pid| pid != me && pid != 0)
                .collect();
            holders.sort_unstable();
            holders.dedup();
            let (mut seen, mut next) = (holders.clone(), holders.clone());
            while let Some(pid) = next.pop() {
                let blockers: Vec<i32> =
                    pgrx::direct_function_call(pg_sys::pg_blocking_pids, &[pid.into_datum()])
                        .unwrap_or_default();
                for blocker in blockers {
                    if blocker == me {
                        return Some(holders);
                    }
                    if !seen.contains(&blocker) {
                        seen.push(blocker);
                        next.push(blocker);
                    }
                }
            }
            None
        })
    }
}

/// Takes a slot of `key`: at once when the line is empty and a slot free, else (unless
/// `wait` is `Never`) in line, then at the head of it until a slot comes free.
fn take_slot(key: LockKey, permits: u16, wait: Wait, scope: Scope) -> Option<u16> {
    let queue = key.permit_queue_tag();
    let exclusive = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    // The line's lock is the transaction's, let go as soon as a slot is taken (an error lets
    // go of it with the rest).
    let leave_line = || unsafe { pg_sys::LockRelease(&queue, exclusive, false) };
    let now = || unsafe { pg_sys::GetCurrentTimestamp() };
    let started = now();
    let at_head_at_once = try_lock_exclusive(&queue, false);
    if at_head_at_once {
        if let Some(slot) = try_slots(key, permits, scope) {
            leave_line();
            stats::one(key, Count::AcquiredImmediately);
            return Some(slot);
        }
    }
    let timeout_ms = match wait {
        Wait::Never => {
            if at_head_at_once {
                leave_line();
            }
            stats::one(key, Count::Busy);
            return None;
        }
        Wait::AtMost { of, .. } => Some(of),
        Wait::Unbounded => {
            let lock_timeout = unsafe { pg_sys::LockTimeout };
            (lock_timeout > 0).then_some(lock_timeout)
        }
    };
    // A wait that only this backend could end is refused, not waited out.
    let waits = !matches!(wait, Wait::AtMost { millis: 0, .. });
    if waits
        && own_slots(key)
            .iter()
            .filter(|&&slot| slot <= permits)
            .count()
            >= usize::from(permits)
    {
        if at_head_at_once {
            leave_line();
        }
        FencedError::PermitSelfWait {
            key,
            permits: permits.into(),
        }
        .raise();
    }
    // A wait's time counts however it ends: a grant, the own timeout, or an error.
    let in_line = at_head_at_once
        || pgrx::PgTryBuilder::new(|| wait_in_line(key, &queue, wait))
            .catch_others(|error| {
                stats::waited(key, started);
                error.rethrow()
            })
            .execute();
    if !in_line {
        stats::waited(key, started);
        stats::one(key, Count::Timeouts);
        FencedError::PermitNotAcquired {
            key,
            permits: permits.into(),
            timeout_ms: timeout_ms.unwrap_or_default(),
            lock_timeout: false,
        }
        .raise();
    }
    let deadline = timeout_ms.map(|ms| started + i64::from(ms) * 1000);
    let channel = wakeups::channel(key);
    // Checked for a cycle after deadlock_timeout, as the lock manager checks its waiters, and
    // again every deadlock_timeout while the wait goes on.
    let deadlock_timeout_us = i64::from(unsafe { pg_sys::DeadlockTimeout }.max(1)) * 1000;
    let mut deadlock_check_at = started.saturating_add(deadlock_timeout_us);
    let granted = loop {
        // Prepared before looking, so a release between the look and the sleep still wakes
        // this backend.
        if let Some(channel) = channel {
            unsafe { pg_sys::ConditionVariablePrepareToSleep(channel) };
        }
        let slot = try_slots(key, permits, scope);
        let left_us = deadline.map_or(i64::MAX, |deadline| deadline - now());
        if slot.is_some() || left_us <= 0 {
            if channel.is_some() {
                unsafe { pg_sys::ConditionVariableCancelSleep() };
            }
            break slot;
        }
        if now() >= deadlock_check_at {
            if let Some(holders) = permit_deadlock(key, permits) {
                if channel.is_some() {
                    unsafe { pg_sys::ConditionVariableCancelSleep() };
                }
                stats::waited(key, started);
                stats::one(key, Count::Deadlocks);
                FencedError::PermitDeadlock { key, holders }.raise();
            }
            deadlock_check_at = now().saturating_add(deadlock_timeout_us);
        }
        let until_check_ms = ((deadlock_check_at - now()).max(0) + 999) / 1000;
        let sleep_ms = ((left_us.saturating_add(999)) / 1000)
            .min(RECHECK_MS)
            .min(until_check_ms.max(1));
        wakeups::sleep(channel, sleep_ms, crate::compat::permit_wait_event());
    };
    leave_line();
    stats::waited(key, started);
    match (granted, wait) {
        (Some(slot), _) => {
            stats::one(key, Count::AcquiredAfterWait);
            Some(slot)
        }
        (None, Wait::Never) => None,
        (None, wait) => {
            let lock_timeout = matches!(wait, Wait::Unbounded);
            stats::one(
                key,
                if lock_timeout {
                    Count::LockTimeouts
                } else {
                    Count::Timeouts
                },
            );
            FencedError::PermitNotAcquired {
                key,
                permits: permits.into(),
                timeout_ms: timeout_ms.unwrap_or_default(),
                lock_timeout,
            }
            .raise()
        }
    }
}

// A permit at transaction scope: released when the transaction ends. Waiting forms raise
// 55P03 when `timeout` (or lock_timeout) runs out; try forms return no row when busy.
key_forms! {
    names: [acquire_permit, acquire_permit_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [permits: Option<i32>, timeout: default!(Option<Interval>, "NULL"),],
    returns: TableIterator<'static, (name!(slot, i32), name!(token, i64))>,
    |fcinfo, function, keyed| {
        let wait = wait_argument(timeout);
        TableIterator::new(acquire(fcinfo, function, keyed, permits, wait, Grant::Transaction))
    },
}

key_forms! {
    names: [try_acquire_permit, try_acquire_permit_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [permits: Option<i32>,],
    returns: TableIterator<'static, (name!(slot, i32), name!(token, i64))>,
    |fcinfo, function, keyed| {
        TableIterator::new(acquire(fcinfo, function, keyed, permits, Wait::Never, Grant::Transaction))
    },
}

// A permit at session scope, for `owner` or for none: until release_permit or the session's
// end; only its owner gets it back or releases it.
key_forms! {
    names: [acquire_permit_session, acquire_permit_session_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [
        permits: Option<i32>,
        timeout: default!(Option<Interval>, "NULL"),
        owner: default!(Option<&str>, "NULL"),
    ],
    returns: TableIterator<'static, (name!(slot, i32), name!(token, i64))>,
    |fcinfo, function, keyed| {
        let grant = Grant::Session { owner: optional_owner(owner, function) };
        let wait = wait_argument(timeout);
        TableIterator::new(acquire(fcinfo, function, keyed, permits, wait, grant))
    },
}

key_forms! {
    names: [try_acquire_permit_session, try_acquire_permit_session_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [permits: Option<i32>, owner: default!(Option<&str>, "NULL"),],
    returns: TableIterator<'static, (name!(slot, i32), name!(token, i64))>,
    |fcinfo, function, keyed| {
        let grant = Grant::Session { owner: optional_owner(owner, function) };
        TableIterator::new(acquire(fcinfo, function, keyed, permits, Wait::Never, grant))
    },
}

/// Releases this session's permit `slot` of `key` if it was taken for `owner`: true, or false
/// with a WARNING when this session does not hold it at session scope, or holds it for
/// another owner.
fn release_for(
    function: &'static str,
    key: LockKey,
    slot: Option<i32>,
    owner: Option<&str>,
) -> bool {
    let lock = Lockable {
        key,
        permit: permit_argument(slot, function, "slot"),
    };
    refuse_in_parallel_mode(function);
    match current_grant(lock) {
        Some(held) if held.scope == Scope::Session => {
            let held_for = grants::session_owner(lock);
            if held_for.as_deref() != owner {
                warn_held_for_another_owner(lock, held_for.as_deref());
                return false;
            }
            grants::forget_session(lock);
            release(lock);
            true
        }
        held => {
            warn_not_held(lock, held.is_some());
            false
        }
    }
}

/// Releases a session-scoped permit's lock and wakes the key's line.
pub(crate) fn release(lock: Lockable) {
    unsafe { pg_sys::LockRelease(&lock.locktag(), pg_sys::ExclusiveLock as _, true) };
    wakeups::wake_now(lock.key);
}

// Releases this session's permit of the key in `slot`, taken for `owner` (NULL: without
// one): true, or false with a WARNING when it is not held so.
key_forms! {
    names: [release_permit, release_permit_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [slot: Option<i32>, owner: default!(Option<&str>, "NULL"),],
    returns: bool,
    |_fcinfo, function, keyed| {
        release_for(function, keyed.key, slot, optional_owner(owner, function))
    },
}
