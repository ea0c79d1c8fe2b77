//! Fenced locks: the advisory lock on (ns, id), taken through the lock manager exactly as
//! `pg_advisory_xact_lock(ns, id)` (or, at session scope, `pg_advisory_lock(ns, id)`) takes
//! it, plus a token drawn after the grant, so that every later grant of any key draws a
//! larger one. This module holds the lock manager calls, the key forms every key-taking SQL
//! function is declared with (`key_forms!`), and the transaction-scoped SQL functions;
//! `session` has the session-scoped ones, `permits` the semaphores, `key_sets` many keys in
//! one call.

use crate::errors::{outside_transaction_block, refuse_in_parallel_mode, FencedError, OrRaise};
use crate::grants;
use crate::settings::{self, OutsideTransaction};
use crate::stats::{self, Count};
use crate::types::{required, LockKey, Lockable, Mode, NewGrant, Scope, MAX_PERMITS};
use crate::unguarded;
use crate::{namespaces, tokens};
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// A key as a function received it, resolved: the lock key, and for a named key the text it
/// was given as (shown by fenced_locks beside the hash).
pub(crate) struct Keyed {
    pub key: LockKey,
    pub label: Option<String>,
}

impl Keyed {
    /// (ns, id): the key itself.
    pub fn pair(function: &'static str, ns: Option<i32>, id: Option<i32>) -> Keyed {
        let key = LockKey {
            ns: required(ns, function, "ns").or_raise(),
            id: required(id, function, "id").or_raise(),
        };
        Keyed { key, label: None }
    }

    /// (namespace, key): (the namespace's registered id, fenced_key(key)).
    pub fn named(
        fcinfo: pg_sys::FunctionCallInfo,
        function: &'static str,
        namespace: Option<&str>,
        key: Option<&str>,
    ) -> Keyed {
        let namespace = required(namespace, function, "namespace").or_raise();
        let key = required(key, function, "key").or_raise();
        Keyed::in_namespace(namespaces::namespace_id(fcinfo, namespace), key)
    }

    /// `key` in the namespace whose id is `ns`: (ns, fenced_key(key)).
    pub fn in_namespace(ns: i32, key: &str) -> Keyed {
        Keyed {
            key: LockKey {
                ns,
                id: namespaces::fnv1a_32(key.as_bytes()),
            },
            label: Some(key.to_string()),
        }
    }
}

/// The longest owner (and lease key text) accepted, in bytes: identifiers, stored in the
/// grants table and the lease table, which no role may fill with text of any length.
pub(crate) const MAX_IDENTIFIER_BYTES: usize = 256;

/// The `owner` argument of `function`: required (22004), at most MAX_IDENTIFIER_BYTES long
/// (22001).
pub(crate) fn owner_argument<'a>(owner: Option<&'a str>, function: &'static str) -> &'a str {
    let owner = required(owner, function, "owner").or_raise();
    if owner.len() > MAX_IDENTIFIER_BYTES {
        FencedError::ValueTooLong {
            function,
            argument: "owner",
            limit: MAX_IDENTIFIER_BYTES,
        }
        .raise();
    }
    owner
}

/// An optional `owner` argument (NULL: none): at most MAX_IDENTIFIER_BYTES long (22001).
pub(crate) fn optional_owner<'a>(
    owner: Option<&'a str>,
    function: &'static str,
) -> Option<&'a str> {
    owner.map(|owner| owner_argument(Some(owner), function))
}

/// The `shared` argument: the lock mode asked for (NULL is 22004).
pub(crate) fn mode_argument(shared: Option<bool>, function: &'static str) -> Mode {
    match required(shared, function, "shared").or_raise() {
        true => Mode::Shared,
        false => Mode::Exclusive,
    }
}

/// A `timeout` argument: NULL waits without a limit of fenced_lock's own.
pub(crate) fn wait_argument(timeout: Option<Interval>) -> Wait {
    timeout.map_or(Wait::Unbounded, Wait::from_timeout)
}

/// A `permits` count or a `slot` number (`name` says which): required (22004),
/// 1..=MAX_PERMITS (22023).
pub(crate) fn permit_argument(
    value: Option<i32>,
    function: &'static str,
    name: &'static str,
) -> u16 {
    let value = required(value, function, name).or_raise();
    if !(1..=MAX_PERMITS).contains(&value) {
        FencedError::InvalidArgument {
            message: format!("{function}: \"{name}\" must be between 1 and {MAX_PERMITS}"),
            hint: None,
        }
        .raise();
    }
    value as u16
}

/// How long an acquisition may wait for the key.
#[derive(Clone, Copy)]
pub(crate) enum Wait {
    /// Until granted, or until lock_timeout, statement_timeout, cancel or a deadlock ends it.
    Unbounded,
    /// Not at all: a busy key is reported as None.
    Never,
    /// At most `millis` milliseconds; then (or at once, for 0) raise 55P03, which names the
    /// caller's whole timeout, `of` (a call that takes several keys shares one timeout).
    AtMost { millis: i32, of: i32 },
}

impl Wait {
    pub(crate) fn from_timeout(timeout: Interval) -> Wait {
        Wait::from_micros(timeout.as_micros()).or_raise()
    }

    /// A timeout of `micros` microseconds (as `Interval::as_micros` counts an interval).
    fn from_micros(micros: i128) -> Result<Wait, FencedError> {
        if micros < 0 {
            return Err(FencedError::NegativeTimeout);
        }
        // Round up, so that a positive timeout never becomes "do not wait".
        let millis =
            i32::try_from((micros + 999) / 1000).map_err(|_| FencedError::TimeoutTooLong)?;
        Ok(Wait::AtMost { millis, of: millis })
    }
}

/// What a grant is asked for: the scope, and at session scope the owner it is taken for (the
/// only caller that gets a held session grant's token back).
#[derive(Clone, Copy)]
pub(crate) enum Grant<'a> {
    Transaction,
    Session { owner: Option<&'a str> },
}

impl<'a> Grant<'a> {
    pub(crate) fn scope(self) -> Scope {
        match self {
            Grant::Transaction => Scope::Transaction,
            Grant::Session { .. } => Scope::Session,
        }
    }

    pub(crate) fn owner(self) -> Option<&'a str> {
        match self {
            Grant::Transaction => None,
            Grant::Session { owner } => owner,
        }
    }
}

/// A hot standby hands out no grant (25006): its advisory locks do not exclude the primary's
/// holders, and it cannot draw tokens.
pub(crate) fn refuse_on_hot_standby() {
    if unguarded::recovery_in_progress() {
        FencedError::HotStandby.raise();
    }
}

/// A transaction-scoped lock taken outside a transaction block would end with its statement:
/// 25P01 (or, with fenced_lock.outside_transaction = warning, a WARNING once per
/// transaction). An implicit block (several statements in one simple query) counts as a block.
pub(crate) fn refuse_outside_transaction_block(function: &'static str, key: LockKey) {
    if unguarded::in_transaction_block() {
        return;
    }
    match settings::outside_transaction() {
        OutsideTransaction::Error => outside_transaction_block(function, key, PgLogLevel::ERROR),
        OutsideTransaction::Warning if grants::first_warning_in_transaction() => {
            outside_transaction_block(function, key, PgLogLevel::WARNING)
        }
        OutsideTransaction::Warning => {}
    }
}

/// The two ways the SQL functions ask for a key: wait (`wait_argument`), or try (None when
/// busy).
pub(crate) fn acquire_waiting(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: Keyed,
    timeout: Option<Interval>,
    grant: Grant,
    mode: Mode,
) -> i64 {
    acquire(fcinfo, function, keyed, wait_argument(timeout), grant, mode)
        .expect("a wait ends in a grant or an error")
}

pub(crate) fn try_acquire(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: Keyed,
    grant: Grant,
    mode: Mode,
) -> Option<i64> {
    acquire(fcinfo, function, keyed, Wait::Never, grant, mode)
}

/// Takes `tag` in exclusive mode without waiting, for the session (`session`) or the
/// transaction: whether it was granted (also when this backend held it already).
pub(crate) fn try_lock_exclusive(tag: &pg_sys::LOCKTAG, session: bool) -> bool {
    unsafe {
        pg_sys::LockAcquire(tag, pg_sys::ExclusiveLock as _, session, true)
            != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
    }
}

/// Waits in a line of `key`'s waiting acquires (the lock `line`, which the lock manager grants
/// in arrival order) until at its head: true, or false when a bounded wait ran out (the
/// caller counts it). An unbounded wait ends at the head of the line or in an error
/// (lock_timeout, a deadlock, a cancel), counted as the lock manager's waits are.
pub(crate) fn wait_in_line(key: LockKey, line: &pg_sys::LOCKTAG, wait: Wait) -> bool {
    let in_line = || unsafe {
        pg_sys::LockAcquire(line, pg_sys::ExclusiveLock as _, false, false);
        true
    };
    let counted = |code: PgSqlErrorCode| match code {
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE => stats::one(key, Count::LockTimeouts),
        PgSqlErrorCode::ERRCODE_T_R_DEADLOCK_DETECTED => stats::one(key, Count::Deadlocks),
        _ => {}
    };
    match wait {
        Wait::AtMost { millis, .. } => {
            let saved = unsafe { pg_sys::LockTimeout };
            unsafe { pg_sys::LockTimeout = millis.max(1) };
            PgTryBuilder::new(in_line)
                .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| false)
                .finally(|| unsafe { pg_sys::LockTimeout = saved })
                .execute()
        }
        _ => PgTryBuilder::new(in_line)
            .catch_others(|error| {
                if let pg_sys::panic::CaughtError::PostgresError(report) = &error {
                    counted(report.sql_error_code());
                }
                error.rethrow()
            })
            .execute(),
    }
}

/// What every grant checks first: not on a hot standby, not in parallel mode, and a
/// transaction-scoped one inside a transaction block.
pub(crate) fn refuse_unusable_call(function: &'static str, key: LockKey, scope: Scope) {
    refuse_on_hot_standby();
    refuse_in_parallel_mode(function);
    if scope == Scope::Transaction {
        refuse_outside_transaction_block(function, key);
    }
}

/// Acquires the lock on `key` in `mode` as `grant` asks and returns its token, or None when
/// `wait` is `Never` and the key is held by another session, or by this one for another owner.
fn acquire(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: Keyed,
    wait: Wait,
    grant: Grant,
    mode: Mode,
) -> Option<i64> {
    let scope = grant.scope();
    let key = keyed.key;
    let lockable = Lockable::advisory(key);
    refuse_unusable_call(function, key, scope);
    // One grant, one token: a key this backend holds is not locked or numbered again. A
    // session grant goes back only to its owner: behind a pooler this session may now serve
    // another client. A grant in the other mode is refused: an upgrade from shared to
    // exclusive deadlocks as soon as two shared holders both try it.
    let held = current_grant(lockable);
    if let Some(held) = held.filter(|held| held.scope == scope && held.mode != mode) {
        FencedError::ModeConflict {
            key,
            held: held.mode,
        }
        .raise();
    }
    match (held.map(|held| (held.scope, held.token)), grant) {
        (Some((Scope::Transaction, token)), Grant::Transaction) => return Some(token),
        (Some((Scope::Session, token)), Grant::Session { owner }) => {
            let held_for = grants::session_owner(lockable);
            if owner.is_some() && owner == held_for.as_deref() {
                return Some(token);
            }
            match wait {
                Wait::Never => return None,
                _ => FencedError::HeldForAnotherOwner {
                    key,
                    owner: held_for,
                }
                .raise(),
            }
        }
        (Some((held, _)), _) => FencedError::ScopeConflict { key, held }.raise(),
        (None, _) => {}
    }
    let sentinel = take_session_sentinel(scope);
    if !lock(key, key.locktag(), mode, wait, scope) {
        sentinel.give_back();
        return None;
    }
    let new = NewGrant {
        lock: lockable,
        mode,
        scope,
        label: keyed.label.as_deref(),
        owner: grant.owner(),
    };
    Some(grant_token(fcinfo, new))
}

/// The session sentinel as a session grant needs it (taken before the grant's lock: were the
/// lock table full, the error would leave nothing behind, where a session lock on the key
/// would outlive the error without a grant).
pub(crate) struct SentinelTaken(bool);

impl SentinelTaken {
    /// Gives the sentinel back when it was taken for a grant that did not come.
    pub(crate) fn give_back(self) {
        if self.0 {
            unsafe { pg_sys::LockRelease(&session_sentinel(), pg_sys::ExclusiveLock as _, true) };
        }
    }
}

pub(crate) fn take_session_sentinel(scope: Scope) -> SentinelTaken {
    let sentinel = session_sentinel();
    let take = scope == Scope::Session && !held_by_me(&sentinel);
    if take {
        // Nobody else ever asks for this tag: granted at once.
        unsafe { pg_sys::LockAcquire(&sentinel, pg_sys::ExclusiveLock as _, true, true) };
    }
    SentinelTaken(take)
}

/// The token of a grant whose lock was just taken, remembered and counted. Drawn after the
/// grant: a later holder of any key is granted, and so draws, later. A session lock outlives
/// the error that could end this (a cancelled durable wait, say), so it is released again
/// rather than left held without a token.
pub(crate) fn grant_token(fcinfo: pg_sys::FunctionCallInfo, new: NewGrant) -> i64 {
    let (lockable, mode) = (new.lock, new.mode);
    let token = match new.scope {
        Scope::Transaction => tokens::next_token(fcinfo),
        Scope::Session => PgTryBuilder::new(|| tokens::next_token(fcinfo))
            .catch_others(|error| {
                unsafe { pg_sys::LockRelease(&lockable.locktag(), mode.lockmode(), true) };
                error.rethrow()
            })
            .execute(),
    };
    let (key, scope) = (lockable.key, new.scope);
    grants::remember(&[new], token);
    stats::one(key, Count::TokensIssued);
    if scope == Scope::Session {
        stats::one(key, Count::SessionGrants);
        // An exclusive session grant is a leader's term.
        if mode == Mode::Exclusive && lockable.permit == 0 {
            stats::one(key, Count::LeaderTerms);
        }
    }
    token
}

/// A lock only this backend takes, held at session level beside its session grants.
/// `pg_advisory_unlock_all()` and `DISCARD ALL` (what poolers run between clients) release
/// every session-level lock of the advisory lock method, this one included, and nothing else
/// releases it: when it is gone, every session grant's lock went with it. It shows in
/// pg_locks as locktype 'userlock' (database, classid = the backend's PID).
fn session_sentinel() -> pg_sys::LOCKTAG {
    session_sentinel_of(unsafe { pg_sys::MyProcPid })
}

/// The sentinel of backend `pid` in this database.
pub(crate) fn session_sentinel_of(pid: i32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: pid as u32,
        locktag_field3: 0,
        locktag_field4: 0,
        locktag_type: pg_sys::LockTagType::LOCKTAG_USERLOCK as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

pub(crate) fn held_by_me(tag: &pg_sys::LOCKTAG) -> bool {
    crate::compat::lock_held_by_me(tag, pg_sys::ExclusiveLock as _)
}

/// Forgets (and withdraws from shared memory) every session grant whose lock was released
/// all at once behind fenced_lock's back, so a lock taken again later is a new grant.
fn forget_session_grants_released_in_bulk() {
    if grants::any_session_grant() && !held_by_me(&session_sentinel()) {
        grants::forget_all_sessions();
    }
}

/// The grant this backend holds on `lock`. Transaction grants follow their transaction
/// exactly; session locks can also be dropped behind fenced_lock's back, all at once
/// (`pg_advisory_unlock_all`, `DISCARD ALL`: the sentinel tells) or one by one
/// (`pg_advisory_unlock`: checked against the lock table), and are then forgotten.
pub(crate) fn current_grant(lock: Lockable) -> Option<grants::Held> {
    forget_session_grants_released_in_bulk();
    let held = grants::held(lock)?;
    let lock_gone = held.scope == Scope::Session
        && !crate::compat::lock_held_by_me(&lock.locktag(), held.mode.lockmode());
    if lock_gone {
        grants::forget_session(lock);
        return None;
    }
    Some(held)
}

/// Takes the lock `tag` of `key` in `mode` at `scope`; false when `Wait::Never` found it
/// held. Tried without waiting first (a waiting request still queues behind earlier waiters:
/// the lock manager refuses a try that conflicts with them), so that a wait is seen, timed and
/// counted, and its end (a timeout, a deadlock) too.
pub(crate) fn lock(
    key: LockKey,
    tag: pg_sys::LOCKTAG,
    mode: Mode,
    wait: Wait,
    scope: Scope,
) -> bool {
    let session = scope == Scope::Session;
    let lock_acquire = |dont_wait: bool| unsafe {
        pg_sys::LockAcquire(&tag, mode.lockmode(), session, dont_wait)
            != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
    };
    if lock_acquire(true) {
        stats::one(key, Count::AcquiredImmediately);
        return true;
    }
    match wait {
        Wait::Never => {
            stats::one(key, Count::Busy);
            false
        }
        Wait::Unbounded => waited(key, Count::LockTimeouts, || lock_acquire(false)),
        Wait::AtMost { millis: 0, of } => {
            stats::one(key, Count::Timeouts);
            not_acquired(key, of)
        }
        Wait::AtMost { millis, of } => {
            // The lock manager's own lock_timeout machinery bounds the wait, so the wait
            // stays in the queue (fair, deadlock-checked) rather than polling.
            let saved = unsafe { pg_sys::LockTimeout };
            unsafe { pg_sys::LockTimeout = millis };
            PgTryBuilder::new(|| waited(key, Count::Timeouts, || lock_acquire(false)))
                .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| {
                    not_acquired(key, of)
                })
                .finally(|| unsafe { pg_sys::LockTimeout = saved })
                .execute()
        }
    }
}

/// A wait in the lock manager's queue, timed and counted: granted, or ended by a lock
/// timeout (counted as `timeout`), a deadlock or any other error, which goes on. Its time
/// counts whether or not it ended in a grant.
fn waited(
    key: LockKey,
    timeout: Count,
    wait: impl FnOnce() -> bool + std::panic::UnwindSafe,
) -> bool {
    let started = unsafe { pg_sys::GetCurrentTimestamp() };
    let granted = PgTryBuilder::new(wait)
        .catch_others(|error| {
            stats::waited(key, started);
            if let pg_sys::panic::CaughtError::PostgresError(report) = &error {
                match report.sql_error_code() {
                    PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE => stats::one(key, timeout),
                    PgSqlErrorCode::ERRCODE_T_R_DEADLOCK_DETECTED => {
                        stats::one(key, Count::Deadlocks)
                    }
                    _ => {}
                }
            }
            error.rethrow()
        })
        .execute();
    stats::waited(key, started);
    stats::one(key, Count::AcquiredAfterWait);
    granted
}

fn not_acquired(key: LockKey, timeout_ms: i32) -> ! {
    FencedError::LockNotAcquired {
        key,
        timeout_ms,
        holders: holder_pids(key),
    }
    .raise()
}

/// A copy of the lock manager's table (every lock of every backend, held or awaited), taken
/// as pg_locks takes it, in the current memory context. It locks each partition in turn: for
/// error paths and inspection only.
///
/// # Safety
/// The slice is the copy itself, read in place: it must not be used after the memory context
/// that was current is reset (a set-returning function's first call runs in the context that
/// lasts until its scan ends).
pub(crate) unsafe fn lock_table<'a>() -> &'a [pg_sys::LockInstanceData] {
    unsafe {
        let data = pg_sys::GetLockStatusData();
        match (*data).nelements {
            0 => &[],
            count => std::slice::from_raw_parts((*data).locks, count as usize),
        }
    }
}

/// PIDs of the other backends that hold `key` in any mode (0 for a prepared transaction).
/// Only called on the error path: it copies the whole lock table.
fn holder_pids(key: LockKey) -> Vec<i32> {
    let tag = key.locktag();
    let my_pid = unsafe { pg_sys::MyProcPid };
    // The copy is read before this function returns.
    let mut pids: Vec<i32> = unsafe { lock_table() }
        .iter()
        .filter(|lock| same_tag(&lock.locktag, &tag) && lock.holdMask != 0)
        .map(|lock| lock.pid)
        .filter(|&pid| pid != my_pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

pub(crate) fn same_tag(a: &pg_sys::LOCKTAG, b: &pg_sys::LOCKTAG) -> bool {
    (
        a.locktag_field1,
        a.locktag_field2,
        a.locktag_field3,
        a.locktag_field4,
        a.locktag_type,
        a.locktag_lockmethodid,
    ) == (
        b.locktag_field1,
        b.locktag_field2,
        b.locktag_field3,
        b.locktag_field4,
        b.locktag_type,
        b.locktag_lockmethodid,
    )
}

/// The two SQL forms of a key-taking function `F`: `F(ns int4, id int4, ...)` and
/// `F_named(namespace text, key text, ...)`. Separate names, not overloads: a driver's untyped
/// parameters would make PostgreSQL pick the text overload (unknown prefers the string
/// category), and lock another key. `arguments` are pasted as written (with pgrx's
/// `default!`), after the key. `$body` sees the function's SQL name as `$function` and the
/// resolved `Keyed` as `$keyed`.
macro_rules! key_forms {
    (
        names: [$pair:ident, $named:ident],
        attributes: [$($attr:tt)*],
        arguments: [$($arguments:tt)*],
        returns: $ret:ty,
        |$fcinfo:ident, $function:ident, $keyed:ident| $body:expr $(,)?
    ) => {
        #[pg_extern($($attr)*)]
        #[allow(clippy::type_complexity)] // pgrx needs table rows spelled out
        fn $pair(
            ns: Option<i32>,
            id: Option<i32>,
            $($arguments)*
            fcinfo: pg_sys::FunctionCallInfo,
        ) -> $ret {
            let ($fcinfo, $function) = (fcinfo, stringify!($pair));
            let $keyed = $crate::locking::Keyed::pair($function, ns, id);
            $body
        }

        #[pg_extern($($attr)*)]
        #[allow(clippy::type_complexity)] // pgrx needs table rows spelled out
        fn $named(
            namespace: Option<&str>,
            key: Option<&str>,
            $($arguments)*
            fcinfo: pg_sys::FunctionCallInfo,
        ) -> $ret {
            let ($fcinfo, $function) = (fcinfo, stringify!($named));
            let $keyed = $crate::locking::Keyed::named($fcinfo, $function, namespace, key);
            $body
        }
    };
}
pub(crate) use key_forms;

// The transaction-scoped lock (pg_advisory_xact_lock's, or with `shared`
// pg_advisory_xact_lock_shared's) and a new token; released when the transaction ends.
key_forms! {
    names: [acquire_fenced, acquire_fenced_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [
        timeout: default!(Option<Interval>, "NULL"),
        shared: default!(Option<bool>, false),
    ],
    returns: i64,
    |fcinfo, function, keyed| {
        let mode = mode_argument(shared, function);
        acquire_waiting(fcinfo, function, keyed, timeout, Grant::Transaction, mode)
    },
}

key_forms! {
    names: [try_acquire_fenced, try_acquire_fenced_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [shared: default!(Option<bool>, false),],
    returns: Option<i64>,
    |fcinfo, function, keyed| {
        let mode = mode_argument(shared, function);
        try_acquire(fcinfo, function, keyed, Grant::Transaction, mode)
    },
}

/// A token from the same allocator, with the same durability, replication and failover
/// guarantees as every grant's, without taking any lock: for work that a lock the caller
/// already holds orders (the row lock of a `FOR UPDATE SKIP LOCKED` claim, say). It is only as
/// safe as that lock: two callers that hold no common lock get tokens that order nothing.
#[pg_extern(volatile, parallel_unsafe)]
fn new_fencing_token(fcinfo: pg_sys::FunctionCallInfo) -> i64 {
    refuse_on_hot_standby();
    refuse_in_parallel_mode("new_fencing_token");
    let token = tokens::next_token(fcinfo);
    stats::count_database(Count::TokensIssued, 1);
    token
}

/// Moves the token sequence forward so that every token drawn after this returns is above
/// `past`, never back: the way out when a resource has accepted tokens this server never
/// issued (a split brain whose discarded side handed out the higher ones, a restore from an
/// old backup). Only for the extension's owner (EXECUTE is revoked from PUBLIC, and drawing
/// from the sequence directly needs its privileges). The sequence's position after it.
#[pg_extern(volatile, parallel_unsafe)]
fn advance_fencing_tokens(fcinfo: pg_sys::FunctionCallInfo, past: Option<i64>) -> i64 {
    let past = required(past, "advance_fencing_tokens", "past").or_raise();
    if past > crate::types::MAX_ADVANCE {
        FencedError::InvalidArgument {
            message: format!(
                "advance_fencing_tokens: \"past\" must be at most {} (2^62)",
                crate::types::MAX_ADVANCE
            ),
            hint: Some(
                "Above it too few tokens would be left to draw (a failover skips \
                 fenced_lock.failover_skip at once). A resource holding a larger token holds a \
                 sentinel, not a token this server issued: set its fence to a real token.",
            ),
        }
        .raise();
    }
    refuse_on_hot_standby();
    refuse_in_parallel_mode("advance_fencing_tokens");
    let position = tokens::advance_past(fcinfo, past);
    stats::tokens_advanced();
    position
}

#[cfg(test)]
mod tests {
    use super::Wait;

    fn millis(micros: i128) -> (i32, i32) {
        match Wait::from_micros(micros) {
            Ok(Wait::AtMost { millis, of }) => (millis, of),
            _ => panic!("a timeout is a bounded wait"),
        }
    }

    // A positive timeout never becomes "do not wait": it rounds up to a whole millisecond.
    #[test]
    fn timeouts_round_up_to_milliseconds() {
        assert_eq!(millis(0), (0, 0));
        assert_eq!(millis(1), (1, 1));
        assert_eq!(millis(250_000), (250, 250));
        assert_eq!(millis(250_001), (251, 251));
        assert_eq!(millis(24 * 86_400_000_000), (2_073_600_000, 2_073_600_000));
        assert!(Wait::from_micros(-1).is_err());
        assert!(Wait::from_micros(i128::from(i32::MAX) * 1000 + 1).is_err());
    }
}
