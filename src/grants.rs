//! The fenced grants this backend holds: which key was granted with which token, at which
//! scope. A re-acquire of a held key returns the remembered token.
//!
//! Transaction-scoped grants are forgotten at commit, abort and PREPARE, and with the savepoint
//! they were taken in when it rolls back, exactly as PostgreSQL releases their locks.
//! Session-scoped grants last until released or until the session ends.

use crate::shared_grants;
use crate::types::{KeyMap, LockKey, Lockable, Mode, NewGrant, Scope};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;

struct TransactionGrant {
    token: i64,
    mode: Mode,
    subxact: pg_sys::SubTransactionId,
    /// Where the grant is published in the shared grants table, if it is.
    slot: Option<u32>,
}

struct SessionGrant {
    token: i64,
    mode: Mode,
    /// Who the grant was taken for (a client-chosen id), if anyone: behind a pooler, the
    /// session may serve another client next, which must not get this grant.
    owner: Option<String>,
    slot: Option<u32>,
}

#[derive(Default)]
struct Grants {
    transaction: KeyMap<Lockable, TransactionGrant>,
    session: KeyMap<Lockable, SessionGrant>,
    warned_outside_block: bool,
}

/// A grant this backend holds.
#[derive(Clone, Copy)]
pub struct Held {
    pub scope: Scope,
    pub mode: Mode,
    pub token: i64,
}

thread_local! {
    static GRANTS: RefCell<Grants> = RefCell::new(Grants::default());
}

/// The grant this backend holds on `lock`, if any.
pub fn held(lock: Lockable) -> Option<Held> {
    GRANTS.with_borrow(|grants| {
        let transaction = (grants.transaction.get(&lock)).map(|g| Held {
            scope: Scope::Transaction,
            mode: g.mode,
            token: g.token,
        });
        transaction.or_else(|| {
            grants.session.get(&lock).map(|g| Held {
                scope: Scope::Session,
                mode: g.mode,
                token: g.token,
            })
        })
    })
}

/// The permit of `key` this backend holds at `scope` (at session scope, taken for `owner`):
/// its slot and token.
pub fn held_permit(key: LockKey, scope: Scope, owner: Option<&str>) -> Option<(u16, i64)> {
    let permit = |lock: &Lockable| lock.key == key && lock.permit != 0;
    GRANTS.with_borrow(|grants| match scope {
        Scope::Transaction => (grants.transaction.iter())
            .find(|(lock, _)| permit(lock))
            .map(|(lock, grant)| (lock.permit, grant.token)),
        Scope::Session => (grants.session.iter())
            .find(|(lock, grant)| permit(lock) && grant.owner.as_deref() == owner)
            .map(|(lock, grant)| (lock.permit, grant.token)),
    })
}

/// The permits this backend holds, at either scope and for any owner.
fn held_permits() -> Vec<Lockable> {
    GRANTS.with_borrow(|grants| {
        (grants.transaction.keys())
            .chain(grants.session.keys())
            .filter(|lock| lock.permit != 0)
            .copied()
            .collect()
    })
}

/// The slots of `key`'s permits this backend holds, at either scope and for any owner.
pub fn held_permit_slots(key: LockKey) -> Vec<u16> {
    (held_permits().into_iter())
        .filter(|lock| lock.key == key)
        .map(|lock| lock.permit)
        .collect()
}

/// The keys of the permits this backend holds (each once).
pub fn permit_keys() -> Vec<LockKey> {
    let mut keys: Vec<LockKey> = held_permits().into_iter().map(|lock| lock.key).collect();
    keys.sort_unstable_by_key(|key| (key.ns, key.id));
    keys.dedup();
    keys
}

/// The owner the session grant on `lock` was taken for (None: no such grant, or no owner).
pub fn session_owner(lock: Lockable) -> Option<String> {
    GRANTS.with_borrow(|grants| grants.session.get(&lock)?.owner.clone())
}

/// Remembers new grants, all granted now with one token.
pub fn remember(new: &[NewGrant], token: i64) {
    let subxact = crate::unguarded::current_subtransaction();
    let mut published_any = false;
    GRANTS.with_borrow_mut(|grants| {
        let acquired_at = crate::unguarded::now();
        shared_grants::publish(new, token, acquired_at, |new, slot| {
            published_any |= slot.is_some();
            match new.scope {
                Scope::Transaction => {
                    let grant = TransactionGrant {
                        token,
                        mode: new.mode,
                        subxact,
                        slot,
                    };
                    grants.transaction.insert(new.lock, grant);
                }
                Scope::Session => {
                    let grant = SessionGrant {
                        token,
                        mode: new.mode,
                        owner: new.owner.map(String::from),
                        slot,
                    };
                    grants.session.insert(new.lock, grant);
                }
            }
        });
    });
    if published_any {
        register_exit_cleanup();
    }
}

/// Forgets the session grant on `lock`; its token, if there was one.
pub fn forget_session(lock: Lockable) -> Option<i64> {
    let grant = GRANTS.with_borrow_mut(|grants| grants.session.remove(&lock))?;
    shared_grants::withdraw(grant.slot);
    Some(grant.token)
}

pub fn any_session_grant() -> bool {
    GRANTS.with_borrow(|grants| !grants.session.is_empty())
}

/// Forgets every session grant; their locks and modes.
pub fn forget_all_sessions() -> Vec<(Lockable, Mode)> {
    forget_sessions_where(|_| true)
}

/// Forgets the session grants taken for `owner` (None: without one); their locks and modes.
pub fn forget_sessions_of(owner: Option<&str>) -> Vec<(Lockable, Mode)> {
    forget_sessions_where(|held_for| held_for == owner)
}

fn forget_sessions_where(forget: impl Fn(Option<&str>) -> bool) -> Vec<(Lockable, Mode)> {
    let forgotten: Vec<(Lockable, SessionGrant)> = GRANTS.with_borrow_mut(|grants| {
        let locks: Vec<Lockable> = (grants.session.iter())
            .filter(|(_, grant)| forget(grant.owner.as_deref()))
            .map(|(&lock, _)| lock)
            .collect();
        locks
            .into_iter()
            .filter_map(|lock| Some((lock, grants.session.remove(&lock)?)))
            .collect()
    });
    shared_grants::withdraw(forgotten.iter().filter_map(|(_, grant)| grant.slot));
    (forgotten.into_iter())
        .map(|(lock, grant)| (lock, grant.mode))
        .collect()
}

/// Every slot this backend has published, for its exit.
fn published_slots() -> Vec<u32> {
    GRANTS.with_borrow(|grants| {
        let transaction = grants.transaction.values().filter_map(|g| g.slot);
        transaction
            .chain(grants.session.values().filter_map(|g| g.slot))
            .collect()
    })
}

/// A backend that exits withdraws what it still has published.
fn register_exit_cleanup() {
    thread_local! {
        static REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !REGISTERED.replace(true) {
        unsafe { pg_sys::before_shmem_exit(Some(on_backend_exit), pg_sys::Datum::from(0)) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_backend_exit(_code: i32, _arg: pg_sys::Datum) {
    shared_grants::withdraw(published_slots());
}

/// True the first time it is asked in a transaction, so a warning is given once.
pub fn first_warning_in_transaction() -> bool {
    GRANTS.with_borrow_mut(|grants| !std::mem::replace(&mut grants.warned_outside_block, true))
}

pub fn register_transaction_callbacks() {
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subtransaction_end), std::ptr::null_mut());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut core::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    // Transaction-scoped locks end at commit and abort; at PREPARE they pass to the
    // prepared transaction, so this backend no longer holds them either.
    if matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PARALLEL_ABORT
            | XACT_EVENT_PREPARE
    ) {
        let ended: Vec<u32> = GRANTS.with_borrow_mut(|grants| {
            grants.warned_outside_block = false;
            grants
                .transaction
                .drain()
                .filter_map(|(_, g)| g.slot)
                .collect()
        });
        shared_grants::withdraw(ended);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subtransaction_end(
    event: pg_sys::SubXactEvent::Type,
    subxact: pg_sys::SubTransactionId,
    parent: pg_sys::SubTransactionId,
    _arg: *mut core::ffi::c_void,
) {
    use pg_sys::SubXactEvent::*;
    let ended: Vec<u32> = GRANTS.with_borrow_mut(|grants| match event {
        // PostgreSQL released the locks taken in the aborted subtransaction.
        SUBXACT_EVENT_ABORT_SUB => {
            let mut ended = Vec::new();
            grants.transaction.retain(|_, grant| {
                let keep = grant.subxact != subxact;
                if !keep {
                    ended.extend(grant.slot);
                }
                keep
            });
            ended
        }
        // Locks of a committed subtransaction now belong to its parent.
        SUBXACT_EVENT_COMMIT_SUB => {
            grants
                .transaction
                .values_mut()
                .filter(|grant| grant.subxact == subxact)
                .for_each(|grant| grant.subxact = parent);
            Vec::new()
        }
        _ => Vec::new(),
    });
    shared_grants::withdraw(ended);
}
