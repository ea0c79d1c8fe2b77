//! The fenced grants this backend holds in the current transaction: which key was granted
//! with which token, and in which subtransaction. A re-acquire of a held key returns the
//! remembered token; a grant rolled back with its savepoint is forgotten, as PostgreSQL
//! releases its lock.

use crate::locking::LockKey;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

struct Grant {
    token: i64,
    subxact: pg_sys::SubTransactionId,
}

#[derive(Default)]
struct TransactionGrants {
    held: HashMap<LockKey, Grant>,
    warned_outside_block: bool,
}

thread_local! {
    static CURRENT: RefCell<TransactionGrants> = RefCell::new(TransactionGrants::default());
}

/// The token of the grant this transaction holds on `key`, if any.
pub fn held_token(key: LockKey) -> Option<i64> {
    CURRENT.with_borrow(|grants| grants.held.get(&key).map(|grant| grant.token))
}

pub fn remember(key: LockKey, token: i64) {
    let subxact = unsafe { pg_sys::GetCurrentSubTransactionId() };
    CURRENT.with_borrow_mut(|grants| grants.held.insert(key, Grant { token, subxact }));
}

/// True the first time it is asked in a transaction, so a warning is given once.
pub fn first_warning_in_transaction() -> bool {
    CURRENT.with_borrow_mut(|grants| !std::mem::replace(&mut grants.warned_outside_block, true))
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
        CURRENT.with_borrow_mut(|grants| {
            grants.held.clear();
            grants.warned_outside_block = false;
        });
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
    CURRENT.with_borrow_mut(|grants| match event {
        // PostgreSQL released the locks taken in the aborted subtransaction.
        SUBXACT_EVENT_ABORT_SUB => grants.held.retain(|_, grant| grant.subxact != subxact),
        // Locks of a committed subtransaction now belong to its parent.
        SUBXACT_EVENT_COMMIT_SUB => grants
            .held
            .values_mut()
            .filter(|grant| grant.subxact == subxact)
            .for_each(|grant| grant.subxact = parent),
        _ => {}
    });
}
