//! Many keys in one call (Curator's MultiLock, Redisson's RMultiLock): the transaction-scoped
//! locks on every key of a set, taken in ascending key order so that two calls with
//! overlapping sets never deadlock whatever order their callers listed the keys in, then one
//! token for all of them, drawn after the last grant.

use crate::errors::{refuse_in_parallel_mode, FencedError, OrRaise};
use crate::grants;
use crate::locking::{self, wait_argument, Keyed, Wait};
use crate::types::{required, LockKey, Lockable, Mode, NewGrant, Scope};
use crate::{namespaces, tokens};
use pgrx::datum::{Array, Interval};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::time::Instant;

/// At most this many keys in one call: each is a lock in the shared lock table, sized by
/// max_locks_per_transaction (64 per connection by default).
const MAX_KEYS: usize = 1000;

/// The elements of a key-set argument: required, not empty, no NULLs, at most MAX_KEYS.
fn elements<T>(
    array: Option<Vec<Option<T>>>,
    function: &'static str,
    argument: &'static str,
) -> Vec<T> {
    let array = required(array, function, argument).or_raise();
    if array.len() > MAX_KEYS {
        FencedError::TooManyKeys {
            function,
            argument,
            limit: MAX_KEYS,
        }
        .raise();
    }
    let values: Vec<T> = array
        .into_iter()
        .collect::<Option<_>>()
        .unwrap_or_else(|| FencedError::NullKey { function, argument }.raise());
    if values.is_empty() {
        FencedError::EmptyKeySet { function, argument }.raise();
    }
    values
}

fn pairs(function: &'static str, ns: Option<i32>, ids: Option<Array<i32>>) -> Vec<Keyed> {
    let ns = required(ns, function, "ns").or_raise();
    let ids = elements(ids.map(|ids| ids.iter().collect()), function, "ids");
    ids.into_iter()
        .map(|id| Keyed {
            key: LockKey { ns, id },
            label: None,
        })
        .collect()
}

fn named(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    namespace: Option<&str>,
    keys: Option<Array<&str>>,
) -> Vec<Keyed> {
    let namespace = required(namespace, function, "namespace").or_raise();
    let keys = keys.map(|keys| keys.iter().map(|key| key.map(String::from)).collect());
    let keys = elements(keys, function, "keys");
    let ns = namespaces::namespace_id(fcinfo, namespace);
    keys.iter()
        .map(|key| Keyed::in_namespace(ns, key))
        .collect()
}

/// Takes every key of `keys` (each once) at transaction scope, in ascending order, and returns
/// one token drawn after the last grant: larger than every earlier grant of any of them. With
/// `Wait::Never` it takes all or none: a busy key releases what the call took before it, and
/// the answer is None. A timeout bounds the whole call. Keys this transaction already holds
/// keep their grant and token; the token returned is then the new one (larger), or, when the
/// call took no key, the largest held one.
fn acquire_all(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    mut keys: Vec<Keyed>,
    wait: Wait,
) -> Option<i64> {
    locking::refuse_on_hot_standby();
    refuse_in_parallel_mode(function);
    keys.sort_by_key(|keyed| (keyed.key.ns, keyed.key.id));
    keys.dedup_by_key(|keyed| keyed.key);
    locking::refuse_outside_transaction_block(function, keys[0].key);
    let started = Instant::now();
    let mut taken: Vec<&Keyed> = Vec::new();
    let mut held_token = None;
    for keyed in &keys {
        match locking::current_grant(Lockable::advisory(keyed.key)) {
            Some(held) if held.scope == Scope::Transaction && held.mode == Mode::Exclusive => {
                held_token = held_token.max(Some(held.token));
                continue;
            }
            Some(held) if held.scope == Scope::Transaction => FencedError::ModeConflict {
                key: keyed.key,
                held: held.mode,
            }
            .raise(),
            Some(held) => FencedError::ScopeConflict {
                key: keyed.key,
                held: held.scope,
            }
            .raise(),
            None => {}
        }
        let wait = match wait {
            Wait::AtMost { of, .. } => {
                let spent = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
                Wait::AtMost {
                    millis: (of - spent).max(0),
                    of,
                }
            }
            other => other,
        };
        let (key, tag) = (keyed.key, keyed.key.locktag());
        if !locking::lock(key, tag, Mode::Exclusive, wait, Scope::Transaction) {
            for keyed in taken {
                let tag = keyed.key.locktag();
                unsafe { pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as _, false) };
            }
            return None;
        }
        taken.push(keyed);
    }
    if taken.is_empty() {
        return held_token;
    }
    let token = tokens::next_token(fcinfo);
    // One token, counted once in each namespace it was drawn for.
    let mut namespaces: Vec<i32> = taken.iter().map(|keyed| keyed.key.ns).collect();
    namespaces.dedup();
    namespaces
        .into_iter()
        .for_each(|ns| crate::stats::count(ns, crate::stats::Count::TokensIssued, 1));
    let new: Vec<NewGrant> = (taken.into_iter())
        .map(|keyed| NewGrant {
            lock: Lockable::advisory(keyed.key),
            mode: Mode::Exclusive,
            scope: Scope::Transaction,
            label: keyed.label.as_deref(),
            owner: None,
        })
        .collect();
    grants::remember(&new, token);
    Some(token)
}

#[pg_extern(volatile, parallel_unsafe)]
fn acquire_fenced_all(
    ns: Option<i32>,
    ids: Option<Array<i32>>,
    timeout: default!(Option<Interval>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> i64 {
    let function = "acquire_fenced_all";
    let keys = pairs(function, ns, ids);
    acquire_all(fcinfo, function, keys, wait_argument(timeout))
        .expect("a wait is granted or raises")
}

#[pg_extern(volatile, parallel_unsafe)]
fn try_acquire_fenced_all(
    ns: Option<i32>,
    ids: Option<Array<i32>>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    let function = "try_acquire_fenced_all";
    acquire_all(fcinfo, function, pairs(function, ns, ids), Wait::Never)
}

#[pg_extern(volatile, parallel_unsafe)]
fn acquire_fenced_all_named(
    namespace: Option<&str>,
    keys: Option<Array<&str>>,
    timeout: default!(Option<Interval>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> i64 {
    let function = "acquire_fenced_all_named";
    let keys = named(fcinfo, function, namespace, keys);
    acquire_all(fcinfo, function, keys, wait_argument(timeout))
        .expect("a wait is granted or raises")
}

#[pg_extern(volatile, parallel_unsafe)]
fn try_acquire_fenced_all_named(
    namespace: Option<&str>,
    keys: Option<Array<&str>>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    let function = "try_acquire_fenced_all_named";
    let keys = named(fcinfo, function, namespace, keys);
    acquire_all(fcinfo, function, keys, Wait::Never)
}
