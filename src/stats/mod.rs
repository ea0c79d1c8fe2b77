//! Cumulative counters, when preloaded: `fenced_lock_stats` (per database and namespace, and
//! per database for what belongs to no namespace) and `fenced_lock_refusals` (per table and
//! check), with `fenced_lock_stats_reset()`; and the refusal log.
//!
//! A backend counts into its own memory while a transaction runs and folds the counts into
//! the shared tables when it ends (commit or abort), with atomic operations on entries it
//! found once: the acquire path takes no lock and writes no shared memory for them.
//! `fenced_lock.track = off` counts nothing.

mod shared;

use crate::errors::{FencedError, StaleToken};
use crate::settings;
use crate::types::LockKey;
use pgrx::pg_sys;
use pgrx::prelude::*;
pub use shared::STATS_PART;
use shared::{EntryKey, Place, NAMESPACES, REFUSALS};
use std::cell::RefCell;
use std::sync::atomic::Ordering;

/// Counters per entry (the namespace table's; the refusal table uses the first few).
pub const COUNTERS: usize = 23;

/// How a backend's count joins the shared one.
#[derive(Clone, Copy)]
pub enum Fold {
    Sum,
    Max,
    /// The latest value replaces the shared one.
    Last,
}

/// A namespace's counters, in fenced_lock_stats' column order. Times are microseconds since
/// PostgreSQL's epoch (TimestampTz), durations microseconds.
#[derive(Clone, Copy)]
pub enum Count {
    AcquiredImmediately,
    AcquiredAfterWait,
    WaitMicros,
    MaxWaitMicros,
    Busy,
    LockTimeouts,
    Timeouts,
    Deadlocks,
    TokensIssued,
    SessionGrants,
    LeaderTerms,
    LeasesAcquired,
    LeasesRenewed,
    LeasesReleased,
    LeasesTakenOver,
    LeasesDelayed,
    ForceReleases,
    FailoverSkips,
    LastSkipTimeline,
    LastSkipAt,
    TokenAdvances,
    LastAdvanceTimeline,
    LastAdvanceAt,
}

const NAMESPACE_FOLDS: [Fold; COUNTERS] = {
    use Fold::*;
    [
        Sum, Sum, Sum, Max, Sum, Sum, Sum, Sum, Sum, Sum, Sum, Sum, Sum, Sum, Sum, Sum, Sum, Sum,
        Last, Max, Sum, Last, Max,
    ]
};

/// A table's and check's counters, in fenced_lock_refusals' column order.
#[derive(Clone, Copy)]
enum RefusalCount {
    Refused,
    LastRefusedToken,
    LastRefusedAt,
    Accepted,
    LastAcceptedToken,
    HighestAccepted,
    LastAcceptedAt,
}

const REFUSAL_FOLDS: [Fold; 7] = {
    use Fold::*;
    [Sum, Last, Max, Sum, Last, Max, Max]
};

/// Where a token is checked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Checker {
    FencedUpdate = 1,
    FencedUpdateStrict,
    EnforceFence,
    FenceCheck,
    FenceCheckStrict,
}

impl Checker {
    const ALL: [Checker; 5] = [
        Checker::FencedUpdate,
        Checker::FencedUpdateStrict,
        Checker::EnforceFence,
        Checker::FenceCheck,
        Checker::FenceCheckStrict,
    ];

    fn name(self) -> &'static str {
        match self {
            Checker::FencedUpdate => "fenced_update",
            Checker::FencedUpdateStrict => "fenced_update_strict",
            Checker::EnforceFence => "enforce_fence",
            Checker::FenceCheck => "fence_check",
            Checker::FenceCheckStrict => "fence_check_strict",
        }
    }
}

/// Which shared table a count goes to: its place and how its counters fold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Namespaces,
    Refusals,
}

impl Kind {
    fn place(self) -> &'static Place {
        match self {
            Kind::Namespaces => &NAMESPACES,
            Kind::Refusals => &REFUSALS,
        }
    }

    fn folds(self) -> &'static [Fold] {
        match self {
            Kind::Namespaces => &NAMESPACE_FOLDS,
            Kind::Refusals => &REFUSAL_FOLDS,
        }
    }
}

/// The namespace table's rows of one database: a namespace's, or the database's own (tokens
/// drawn for no key, failover skips, advances).
const NAMESPACE_ROW: u32 = 1;
const DATABASE_ROW: u32 = 2;

fn database() -> u32 {
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// One key this backend has counted: its shared entry (found once: entries live until the
/// server stops), and the counts not yet folded into it, with the counters they touched.
struct Counted {
    kind: Kind,
    key: EntryKey,
    entry: usize,
    values: [i64; COUNTERS],
    touched: u32,
}

/// Every key this backend has counted (kept, so that a key costs one search of the shared
/// table per backend), which of them have counts to fold, and the last one counted (most
/// calls count the same key as the call before).
#[derive(Default)]
struct Backend {
    counted: Vec<Counted>,
    to_fold: Vec<usize>,
    last: usize,
}

impl Backend {
    /// The position of `key` in `counted`, added (its shared entry found) when new.
    fn position(&mut self, kind: Kind, key: EntryKey) -> usize {
        let matches = |counted: &Counted| counted.kind == kind && counted.key == key;
        if self.counted.get(self.last).is_some_and(matches) {
            return self.last;
        }
        let at = self.counted.iter().position(matches).unwrap_or_else(|| {
            let table = kind
                .place()
                .table()
                .expect("counted only with shared memory");
            self.counted.push(Counted {
                kind,
                key,
                entry: table.index_of(key),
                values: [0; COUNTERS],
                touched: 0,
            });
            self.counted.len() - 1
        });
        self.last = at;
        at
    }
}

thread_local! {
    static BACKEND: RefCell<Backend> = RefCell::new(Backend::default());
}

/// Counting is on, and there is shared memory to count into.
fn counting() -> bool {
    settings::track() && NAMESPACES.table().is_some()
}

fn count_into(kind: Kind, key: EntryKey, number: usize, value: i64) {
    BACKEND.with_borrow_mut(|backend| {
        let at = backend.position(kind, key);
        let counted = &mut backend.counted[at];
        if counted.touched == 0 {
            backend.to_fold.push(at);
        }
        let slot = &mut counted.values[number];
        *slot = match kind.folds()[number] {
            Fold::Sum => *slot + value,
            Fold::Max if counted.touched & (1 << number) != 0 => (*slot).max(value),
            Fold::Max | Fold::Last => value,
        };
        counted.touched |= 1 << number;
    });
}

/// Adds `value` to `count` of namespace `ns` (folded as the counter folds).
pub fn count(ns: i32, count: Count, value: i64) {
    if counting() {
        count_into(
            Kind::Namespaces,
            [database(), ns as u32, NAMESPACE_ROW],
            count as usize,
            value,
        );
    }
}

/// One more of `count` for the key's namespace.
pub fn one(key: LockKey, what: Count) {
    count(key.ns, what, 1);
}

/// A wait on `key` that began at `started` (a TimestampTz) and ends now, granted or not.
pub fn waited(key: LockKey, started: i64) {
    let waited = unsafe { pg_sys::GetCurrentTimestamp() } - started;
    count(key.ns, Count::WaitMicros, waited);
    count(key.ns, Count::MaxWaitMicros, waited);
}

/// The same for the database's own row.
pub fn count_database(count: Count, value: i64) {
    if counting() {
        count_into(
            Kind::Namespaces,
            [database(), 0, DATABASE_ROW],
            count as usize,
            value,
        );
    }
}

/// A failover skip, now, on this timeline.
pub fn failover_skipped() {
    count_database_event(
        Count::FailoverSkips,
        Count::LastSkipTimeline,
        Count::LastSkipAt,
    );
}

/// An advance_fencing_tokens call, now, on this timeline.
pub fn tokens_advanced() {
    count_database_event(
        Count::TokenAdvances,
        Count::LastAdvanceTimeline,
        Count::LastAdvanceAt,
    );
}

/// One more `event`, with the timeline and time of the last.
fn count_database_event(event: Count, timeline: Count, at: Count) {
    count_database(event, 1);
    let current = unsafe { pg_sys::GetWALInsertionTimeLine() };
    count_database(timeline, i64::from(current));
    count_database(at, unsafe { pg_sys::GetCurrentTimestamp() });
}

/// A token `check` accepted at `relation`.
pub fn accepted(check: Checker, relation: pg_sys::Oid, token: i64) {
    if counting() {
        let key = [database(), relation.to_u32(), check as u32];
        count_into(Kind::Refusals, key, RefusalCount::Accepted as usize, 1);
        count_into(
            Kind::Refusals,
            key,
            RefusalCount::LastAcceptedToken as usize,
            token,
        );
        count_into(
            Kind::Refusals,
            key,
            RefusalCount::HighestAccepted as usize,
            token,
        );
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        count_into(
            Kind::Refusals,
            key,
            RefusalCount::LastAcceptedAt as usize,
            now,
        );
    }
}

/// A stale token `check` refused at `relation`: counted, and logged (fenced_lock.log_refusals)
/// at most once a second per table and check across the server, with how many refusals the
/// line stands for.
pub fn refused(check: Checker, relation: pg_sys::Oid, stale: &StaleToken) {
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    let key = [database(), relation.to_u32(), check as u32];
    if counting() {
        count_into(Kind::Refusals, key, RefusalCount::Refused as usize, 1);
        let offered = stale.offered.unwrap_or(0);
        count_into(
            Kind::Refusals,
            key,
            RefusalCount::LastRefusedToken as usize,
            offered,
        );
        count_into(
            Kind::Refusals,
            key,
            RefusalCount::LastRefusedAt as usize,
            now,
        );
    }
    if !settings::log_refusals() {
        return;
    }
    // Without shared memory there is nothing to limit the rate with: every refusal is a line.
    let unlogged = match REFUSALS.table() {
        None => 0,
        Some(table) => {
            let entry = table.entry(entry_of(Kind::Refusals, key));
            let last = entry.logged_at.load(Ordering::Relaxed);
            let due = now - last >= LOG_INTERVAL_MICROS;
            if !due
                || entry
                    .logged_at
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                entry.unlogged.fetch_add(1, Ordering::Relaxed);
                return;
            }
            entry.unlogged.swap(0, Ordering::Relaxed)
        }
    };
    let offered = stale
        .offered
        .map_or("NULL".into(), |token| token.to_string());
    let mut message = format!(
        "fenced_lock: {} refused stale fencing token {offered} for {}: token {} was already \
         accepted",
        check.name(),
        stale.resource,
        stale.accepted
    );
    if unlogged > 0 {
        message.push_str(&format!(
            " ({unlogged} more refusals by {} on this table since the last such line)",
            check.name()
        ));
    }
    // LOG returns: no longjmp crosses the caller's frames.
    ereport!(
        PgLogLevel::LOG,
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        message
    );
}

/// The refusal log writes at most one line per table and check this often.
const LOG_INTERVAL_MICROS: i64 = 1_000_000;

/// The index of `key`'s shared entry.
fn entry_of(kind: Kind, key: EntryKey) -> usize {
    BACKEND.with_borrow_mut(|backend| {
        let at = backend.position(kind, key);
        backend.counted[at].entry
    })
}

/// Folds this backend's counts into shared memory (at every transaction's end).
fn fold_pending() {
    take_pending(|counted| {
        if let Some(table) = counted.kind.place().table() {
            table.fold(
                counted.entry,
                counted.kind.folds(),
                &counted.values,
                counted.touched,
            );
        }
    });
}

/// Hands each key's counts not yet folded to `with`, then zeroes them.
fn take_pending(mut with: impl FnMut(&Counted)) {
    BACKEND.with_borrow_mut(|backend| {
        for at in backend.to_fold.drain(..) {
            let counted = &mut backend.counted[at];
            with(counted);
            (counted.values, counted.touched) = ([0; COUNTERS], 0);
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    if matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PREPARE
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_PARALLEL_ABORT
    ) {
        fold_pending();
    }
}

pub fn register_callback() {
    unsafe { pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut()) };
}

/// Both tables, or 55000 when fenced_lock was not preloaded.
fn tables(view: &'static str) -> (&'static shared::Table, &'static shared::Table) {
    match (NAMESPACES.table(), REFUSALS.table()) {
        (Some(namespaces), Some(refusals)) => (namespaces, refusals),
        _ => FencedError::NotPreloaded { view }.raise(),
    }
}

/// Whether the caller sees every database's rows (superuser, pg_read_all_stats or the
/// extension's owner), or only its own database's. Read from the catalogs directly: no query
/// (whose operators the caller's search_path would resolve), and no transaction ID, so it
/// works on a hot standby and in a parallel plan.
fn sees_every_database() -> bool {
    unsafe {
        let user = pg_sys::GetUserId();
        let extension = pg_sys::get_extension_oid(c"fenced_lock".as_ptr(), true);
        pg_sys::superuser()
            || pg_sys::has_privs_of_role(user, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS))
            || (extension != pg_sys::InvalidOid && crate::compat::owns_extension(extension, user))
    }
}

/// The rows the caller may see of `table` ("other" only to those who see every database):
/// (database, object, detail), the first `width` counters, and those of them at `times` as
/// timestamps (NULL for never).
fn visible_rows(
    table: &shared::Table,
    width: usize,
    times: &[usize],
) -> Vec<(EntryKey, Vec<i64>, Vec<Option<TimestampWithTimeZone>>)> {
    let every = sees_every_database();
    let own = database();
    table
        .claimed()
        .filter(|(key, _)| every || key[0] == own)
        .map(|(key, entry)| {
            let counters: Vec<i64> = entry.counters[..width]
                .iter()
                .map(|counter| counter.load(Ordering::Relaxed))
                .collect();
            let times = times
                .iter()
                .map(|&at| {
                    (counters[at] != 0)
                        .then(|| timestamp(counters[at]))
                        .flatten()
                })
                .collect();
            (key, counters, times)
        })
        .collect()
}

fn timestamp(micros: i64) -> Option<TimestampWithTimeZone> {
    unsafe { TimestampWithTimeZone::from_datum(pg_sys::Datum::from(micros), false) }
}

/// fenced_lock_stats' rows: database (NULL for "other"), namespace (NULL for the database's
/// own row and "other"), the counters in `Count`'s order, the last failover skip's and
/// advance's times, and when they were last reset.
#[allow(clippy::type_complexity)] // pgrx needs table rows spelled out
#[pg_extern(volatile, parallel_restricted)]
fn fenced_lock_stats_rows() -> TableIterator<
    'static,
    (
        name!(dbid, Option<pg_sys::Oid>),
        name!(ns, Option<i32>),
        name!(counters, Vec<i64>),
        name!(times, Vec<Option<TimestampWithTimeZone>>),
        name!(stats_reset, Option<TimestampWithTimeZone>),
    ),
> {
    let (namespaces, _) = tables("fenced_lock_stats");
    let reset = timestamp(namespaces.reset_at());
    let times = [Count::LastSkipAt as usize, Count::LastAdvanceAt as usize];
    let rows = visible_rows(namespaces, COUNTERS, &times).into_iter().map(
        move |([database, object, detail], counters, times)| {
            let dbid = (database != 0).then(|| pg_sys::Oid::from(database));
            let ns = (detail == NAMESPACE_ROW).then_some(object as i32);
            (dbid, ns, counters, times, reset)
        },
    );
    TableIterator::new(rows.collect::<Vec<_>>())
}

/// fenced_lock_refusals' rows: database and table (NULL for "other"), check, the counters in
/// `RefusalCount`'s order, the last refusal's and acceptance's times, and when they were last
/// reset.
#[allow(clippy::type_complexity)] // pgrx needs table rows spelled out
#[pg_extern(volatile, parallel_restricted)]
fn fenced_lock_refusal_rows() -> TableIterator<
    'static,
    (
        name!(dbid, Option<pg_sys::Oid>),
        name!(relid, Option<pg_sys::Oid>),
        name!(check_name, Option<String>),
        name!(counters, Vec<i64>),
        name!(times, Vec<Option<TimestampWithTimeZone>>),
        name!(stats_reset, Option<TimestampWithTimeZone>),
    ),
> {
    let (_, refusals) = tables("fenced_lock_refusals");
    let reset = timestamp(refusals.reset_at());
    let times = [
        RefusalCount::LastRefusedAt as usize,
        RefusalCount::LastAcceptedAt as usize,
    ];
    let rows = visible_rows(refusals, REFUSAL_FOLDS.len(), &times)
        .into_iter()
        .map(move |([database, relation, check], counters, times)| {
            let check = Checker::ALL.into_iter().find(|c| *c as u32 == check);
            (
                (database != 0).then(|| pg_sys::Oid::from(database)),
                (relation != 0).then(|| pg_sys::Oid::from(relation)),
                check.map(|check| check.name().to_string()),
                counters,
                times,
                reset,
            )
        });
    TableIterator::new(rows.collect::<Vec<_>>())
}

/// Zeroes every counter of both views, in every database; when. For the extension's owner
/// (EXECUTE is revoked from PUBLIC; it can be granted).
#[pg_extern(volatile, parallel_unsafe)]
fn fenced_lock_stats_reset() -> Option<TimestampWithTimeZone> {
    let (namespaces, refusals) = tables("fenced_lock_stats");
    // This backend's own counts so far go with the rest.
    take_pending(|_| {});
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    namespaces.reset(now);
    refusals.reset(now);
    timestamp(now)
}
