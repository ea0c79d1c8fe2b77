//! Table-backed leases: a key held by an owner (a client-chosen id) until a TTL on the
//! database's clock runs out, in `fenced_lease_state`. Every call is one statement that
//! commits with its transaction and ties nothing to the server session, so leases work through
//! transaction-mode poolers and serverless drivers, where session locks pass from client to
//! client. A new holder gets a new token from the same sequence as every other grant; an
//! expired lease is taken over by the next acquire (no background worker). Leases and advisory
//! locks are separate key spaces.
//!
//! The table is readable by all and written only here, as its owner (the caller's role is
//! recorded: only it, or a member, renews or releases). A waiting acquire sleeps on a
//! condition variable that releases broadcast (when preloaded), or until the holder's expiry.

use crate::errors::{FencedError, OrRaise};
use crate::locking::key_forms;
use crate::shmem::Part;
use crate::types::{required, LockKey};
use crate::{extension, tokens};
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

const LEASE_TABLE: &std::ffi::CStr = c"fenced_lease_state";

/// How many condition variables waiting acquires sleep on; a key maps to one of them.
const WAKEUP_CHANNELS: usize = 64;

/// Without the shared condition variables (not preloaded), a waiting acquire looks again this
/// often (ms), besides at the holder's expiry.
const UNPRELOADED_RECHECK_MS: i64 = 100;

static mut WAKEUPS: *mut pg_sys::ConditionVariable = std::ptr::null_mut();

fn wakeups_size() -> usize {
    WAKEUP_CHANNELS * std::mem::size_of::<pg_sys::ConditionVariable>()
}

/// The wakeup channels in shared memory (shmem.rs).
pub const WAKEUPS_PART: Part = Part {
    request: || unsafe { pg_sys::RequestAddinShmemSpace(wakeups_size()) },
    place: || unsafe {
        let mut found = false;
        let channels = pg_sys::ShmemInitStruct(
            c"fenced_lock lease wakeups".as_ptr(),
            wakeups_size(),
            &mut found,
        ) as *mut pg_sys::ConditionVariable;
        if !found {
            (0..WAKEUP_CHANNELS).for_each(|i| pg_sys::ConditionVariableInit(channels.add(i)));
        }
        WAKEUPS = channels;
    },
};

thread_local! {
    /// The wakeup channels of the leases this transaction released: broadcast at commit, once
    /// waiters can see the release (a wakeup before that would find the lease still held).
    static RELEASED_CHANNELS: std::cell::RefCell<Vec<*mut pg_sys::ConditionVariable>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

pub fn register_transaction_callback() {
    unsafe { pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut core::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    let committed = matches!(event, XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT);
    if committed || matches!(event, XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT) {
        let released = RELEASED_CHANNELS.with_borrow_mut(std::mem::take);
        if committed {
            let mut released = released;
            released.sort_unstable();
            released.dedup();
            released
                .into_iter()
                .for_each(|channel| unsafe { pg_sys::ConditionVariableBroadcast(channel) });
        }
    }
}

fn wakeup_channel(key: LockKey) -> Option<*mut pg_sys::ConditionVariable> {
    let channels = unsafe { WAKEUPS };
    let index = (key.ns as u32).wrapping_mul(31).wrapping_add(key.id as u32) as usize;
    (!channels.is_null()).then(|| unsafe { channels.add(index % WAKEUP_CHANNELS) })
}

/// The first column of the first row, None when there is no row (or it is NULL).
fn first_value<T: IntoDatum + FromDatum>(
    table: pgrx::spi::SpiTupleTable<'_>,
) -> Result<Option<T>, pgrx::spi::Error> {
    match table.is_empty() {
        true => Ok(None),
        false => table.first().get_one::<T>(),
    }
}

/// Runs `work` with the lease table's owner as the current user and a search_path of
/// pg_catalog only, as a SECURITY DEFINER function with a SET clause runs; `work` gets the
/// table's qualified name and the caller's role. An ERROR in between is cleaned up by the
/// (sub)transaction's abort, which restores both, as it does for such functions.
fn as_table_owner<R>(
    fcinfo: pg_sys::FunctionCallInfo,
    work: impl FnOnce(&str, pg_sys::Oid) -> R,
) -> R {
    let table = extension::qualified(fcinfo, LEASE_TABLE);
    let table_oid = extension::relation(fcinfo, LEASE_TABLE);
    unsafe {
        let (mut caller, mut context) = (pg_sys::InvalidOid, 0);
        pg_sys::GetUserIdAndSecContext(&mut caller, &mut context);
        let owner = table_owner(table_oid);
        let nest_level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        pg_sys::SetUserIdAndSecContext(
            owner,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let result = work(&table, caller);
        pg_sys::SetUserIdAndSecContext(caller, context);
        pg_sys::AtEOXact_GUC(true, nest_level);
        result
    }
}

fn table_owner(table: pg_sys::Oid) -> pg_sys::Oid {
    let relation = unsafe { pgrx::PgRelation::with_lock(table, pg_sys::AccessShareLock as _) };
    unsafe { (*relation.rd_rel).relowner }
}

fn positive(
    interval: Option<Interval>,
    function: &'static str,
    argument: &'static str,
) -> Interval {
    let interval = required(interval, function, argument).or_raise();
    if interval.as_micros() <= 0 {
        FencedError::InvalidArgument {
            message: format!("{function}: \"{argument}\" must be positive"),
            hint: None,
        }
        .raise();
    }
    interval
}

/// The lease's state before an acquire, seen by one statement.
enum Seen {
    /// Taken (new token) or extended (same token): the token.
    Granted(i64),
    /// Held by another owner until this many microseconds from now.
    Held { expires_in_us: i64 },
}

/// One attempt: the lease if it is free, expired, or held by `owner` (and the caller's role).
fn attempt(
    client: &mut SpiClient<'_>,
    fcinfo: pg_sys::FunctionCallInfo,
    table: &str,
    role: pg_sys::Oid,
    keyed: &crate::locking::Keyed,
    owner: &str,
    ttl: Interval,
) -> Result<Seen, pgrx::spi::Error> {
    let key = keyed.key;
    loop {
        // Locks the row only when this call may take it, so a busy lease is never blocked
        // by a caller that only looked (the holder must be able to renew and release).
        let takeable = client
            .update(
                &format!(
                    "SELECT owner IS NOT NULL AND expires_at > clock_timestamp() \
                            AND owner = $3 AND (holder = $4 OR pg_has_role($4, holder, 'USAGE')) \
                       FROM {table} \
                      WHERE ns = $1 AND id = $2 \
                        AND (owner IS NULL OR expires_at <= clock_timestamp() \
                             OR (owner = $3 AND (holder = $4 OR pg_has_role($4, holder, 'USAGE')))) \
                        FOR UPDATE"
                ),
                None,
                &[key.ns.into(), key.id.into(), owner.into(), role.into()],
            )
            .and_then(first_value::<bool>)?;
        match takeable {
            // Still held by this owner: the same token, the TTL extended.
            Some(true) => {
                let token = client
                    .update(
                        &format!(
                            "UPDATE {table} SET renewed_at = clock_timestamp(), \
                                    expires_at = clock_timestamp() + $3 \
                              WHERE ns = $1 AND id = $2 RETURNING token"
                        ),
                        None,
                        &[key.ns.into(), key.id.into(), ttl.into()],
                    )
                    .and_then(first_value::<i64>)?;
                return Ok(Seen::Granted(token.unwrap_or_default()));
            }
            // Free, expired, or this owner's after expiry: drawn under the row lock, after
            // every token of earlier holders, the token of a new grant.
            Some(false) => {
                let token = tokens::next_token(fcinfo);
                client.update(
                    &format!(
                        "UPDATE {table} SET owner = $3, holder = $4, token = $5, key = $6, \
                                acquired_at = clock_timestamp(), renewed_at = clock_timestamp(), \
                                expires_at = clock_timestamp() + $7 \
                          WHERE ns = $1 AND id = $2"
                    ),
                    None,
                    &[
                        key.ns.into(),
                        key.id.into(),
                        owner.into(),
                        role.into(),
                        token.into(),
                        keyed.label.as_deref().into(),
                        ttl.into(),
                    ],
                )?;
                return Ok(Seen::Granted(token));
            }
            None => {}
        }
        let expires_in_us = client
            .update(
                &format!(
                    "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::int8 \
                       FROM {table} WHERE ns = $1 AND id = $2"
                ),
                None,
                &[key.ns.into(), key.id.into()],
            )
            .and_then(first_value::<i64>)?;
        if let Some(expires_in_us) = expires_in_us {
            return Ok(Seen::Held { expires_in_us });
        }
        // No row: the key was never leased. Rows are never deleted, so no earlier holder of
        // this key can have a larger token than one drawn now. A concurrent first lease wins
        // the insert; then look again.
        let token = tokens::next_token(fcinfo);
        let inserted = client
            .update(
                &format!(
                    "INSERT INTO {table} \
                         (ns, id, key, owner, holder, token, acquired_at, renewed_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), clock_timestamp(), \
                             clock_timestamp() + $7) \
                     ON CONFLICT (ns, id) DO NOTHING RETURNING token"
                ),
                None,
                &[
                    key.ns.into(),
                    key.id.into(),
                    keyed.label.as_deref().into(),
                    owner.into(),
                    role.into(),
                    token.into(),
                    ttl.into(),
                ],
            )
            .and_then(first_value::<i64>)?;
        if let Some(token) = inserted {
            return Ok(Seen::Granted(token));
        }
    }
}

/// Acquires the lease, waiting up to `wait` (None: not at all); the token or None.
fn acquire(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: crate::locking::Keyed,
    owner: Option<&str>,
    ttl: Option<Interval>,
    wait: Option<Interval>,
) -> Option<i64> {
    let owner = required(owner, function, "owner").or_raise();
    let ttl = positive(ttl, function, "ttl");
    if unsafe { pg_sys::RecoveryInProgress() } {
        FencedError::HotStandby.raise();
    }
    let now = || unsafe { pg_sys::GetCurrentTimestamp() };
    let deadline =
        wait.map(|wait| now().saturating_add(wait.as_micros().clamp(0, i64::MAX as i128) as i64));
    let channel = wakeup_channel(keyed.key);
    loop {
        // Prepared before looking, so a release between the look and the sleep still wakes
        // this backend.
        if let (Some(channel), Some(_)) = (channel, deadline) {
            unsafe { pg_sys::ConditionVariablePrepareToSleep(channel) };
        }
        let seen = as_table_owner(fcinfo, |table, role| {
            Spi::connect_mut(|client| attempt(client, fcinfo, table, role, &keyed, owner, ttl))
        })
        .map_err(|error| ("acquire_lease", error))
        .or_raise();
        let expires_in_us = match seen {
            Seen::Granted(token) => {
                if channel.is_some() && deadline.is_some() {
                    unsafe { pg_sys::ConditionVariableCancelSleep() };
                }
                return Some(token);
            }
            Seen::Held { expires_in_us } => expires_in_us,
        };
        let deadline = deadline?;
        let left_us = deadline - now();
        if left_us <= 0 {
            if channel.is_some() {
                unsafe { pg_sys::ConditionVariableCancelSleep() };
            }
            return None;
        }
        // Until the holder's expiry (then the lease can be taken over) or the deadline,
        // whichever is first; a release wakes the sleeper earlier.
        let mut sleep_ms = (left_us.min(expires_in_us.max(0)) + 999) / 1000;
        match channel {
            Some(channel) => unsafe {
                pg_sys::ConditionVariableTimedSleep(
                    channel,
                    sleep_ms.max(1),
                    pg_sys::PG_WAIT_EXTENSION,
                );
            },
            None => {
                sleep_ms = sleep_ms.clamp(1, UNPRELOADED_RECHECK_MS);
                unsafe {
                    pg_sys::WaitLatch(
                        pg_sys::MyLatch,
                        (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH)
                            as i32,
                        sleep_ms,
                        pg_sys::PG_WAIT_EXTENSION,
                    );
                    pg_sys::ResetLatch(pg_sys::MyLatch);
                }
            }
        }
        pgrx::check_for_interrupts!();
    }
}

// The lease on the key for `owner`, for `ttl` on the database's clock: its token if the key
// is free, expired, or already held by this owner (then the same token, the TTL extended);
// NULL otherwise. A new holder gets a new token, larger than every earlier one.
key_forms! {
    names: ["acquire_lease", "acquire_lease_named", "acquire_lease_named_bigint"],
    rust: [acquire_lease, acquire_lease_named, acquire_lease_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (owner: Option<&str>, ttl: Option<Interval>),
    returns: Option<i64>,
    |fcinfo, function, keyed| acquire(fcinfo, function, keyed, owner, ttl, None),
}

// The same, waiting up to `wait` for a release or the holder's expiry; then NULL.
key_forms! {
    names: ["acquire_lease", "acquire_lease_named", "acquire_lease_named_bigint"],
    rust: [acquire_lease_wait, acquire_lease_named_wait, acquire_lease_named_bigint_wait],
    attributes: [volatile, parallel_unsafe],
    arguments: (owner: Option<&str>, ttl: Option<Interval>, wait: Option<Interval>),
    returns: Option<i64>,
    |fcinfo, function, keyed| {
        let wait = required(wait, function, "wait").or_raise();
        if wait.as_micros() < 0 {
            FencedError::NegativeTimeout.raise();
        }
        acquire(fcinfo, function, keyed, owner, ttl, Some(wait))
    },
}

/// Runs one statement on the lease held with `token` by the caller's role (or a role it is a
/// member of); its single result, None when no such lease exists.
fn update_held<T: IntoDatum + FromDatum>(
    fcinfo: pg_sys::FunctionCallInfo,
    key: LockKey,
    token: i64,
    set: &str,
    ttl: Option<Interval>,
) -> Option<T> {
    // The new expiry with a TTL ($5), else true.
    let returning = ttl.map_or("true", |_| "expires_at");
    as_table_owner(fcinfo, |table, role| {
        let mut arguments = vec![key.ns.into(), key.id.into(), token.into(), role.into()];
        arguments.extend(ttl.map(Into::into));
        Spi::connect_mut(|client| {
            client
                .update(
                    &format!(
                        "UPDATE {table} SET {set} \
                          WHERE ns = $1 AND id = $2 AND token = $3 AND owner IS NOT NULL \
                            AND (holder = $4 OR pg_has_role($4, holder, 'USAGE')) \
                         RETURNING {returning}"
                    ),
                    None,
                    &arguments,
                )
                .and_then(first_value::<T>)
        })
    })
    .map_err(|error| ("fenced_lease_state", error))
    .or_raise()
}

// Extends the lease held with `token` to `ttl` from now: the new expiry, or NULL when the
// lease is lost (taken over after expiry, released, or never held with that token). A lease
// that expired but was not taken over is still this token's, and is renewed.
key_forms! {
    names: ["renew_lease", "renew_lease_named", "renew_lease_named_bigint"],
    rust: [renew_lease, renew_lease_named, renew_lease_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (token: Option<i64>, ttl: Option<Interval>),
    returns: Option<TimestampWithTimeZone>,
    |_fcinfo, function, keyed| {
        let token = required(token, function, "token").or_raise();
        let ttl = positive(ttl, function, "ttl");
        update_held(
            _fcinfo,
            keyed.key,
            token,
            "renewed_at = clock_timestamp(), expires_at = clock_timestamp() + $5",
            Some(ttl),
        )
    },
}

// Releases the lease held with `token`: true, or false when no lease is held with it (taken
// over after expiry, released already, or never held). Wakes waiting acquires.
key_forms! {
    names: ["release_lease", "release_lease_named", "release_lease_named_bigint"],
    rust: [release_lease, release_lease_named, release_lease_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (token: Option<i64>),
    returns: bool,
    |fcinfo, function, keyed| {
        let token = required(token, function, "token").or_raise();
        let released = update_held::<bool>(
            fcinfo,
            keyed.key,
            token,
            "owner = NULL, holder = NULL, renewed_at = NULL, expires_at = NULL",
            None,
        )
        .is_some();
        if released {
            if let Some(channel) = wakeup_channel(keyed.key) {
                RELEASED_CHANNELS.with_borrow_mut(|channels| channels.push(channel));
            }
        }
        released
    },
}
