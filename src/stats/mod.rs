//! Cumulative counters, when preloaded: `fenced_lock_stats` (per database and namespace, and
//! per database for what belongs to no namespace) and `fenced_lock_refusals` (per table and
//! check), with `fenced_lock_stats_reset()`; and the refusal log.
//!
//! A backend counts into its own memory while a transaction runs (a hash map of the keys it
//! counted in this transaction: constant time a count, nothing kept across transactions) and
//! folds the counts into the shared tables when it ends (commit or abort): the acquire path
//! takes no lock and touches no shared memory for them. `fenced_lock.track = off` counts
//! nothing.

mod shared;

use crate::errors::{FencedError, StaleToken};
use crate::settings;
use crate::types::LockKey;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rustc_hash::FxHashMap;
pub use shared::STATS_PART;
use shared::{Counts, EntryKey, Place, NAMESPACES, REFUSALS};
use std::cell::RefCell;

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
    // The numbers are kept in the stats file: 0.4.0's boolean forms had the plain names.
    FencedUpdateOrFalse = 1,
    FencedUpdate,
    EnforceFence,
    FenceCheckOrFalse,
    FenceCheck,
}

impl Checker {
    const ALL: [Checker; 5] = [
        Checker::FencedUpdateOrFalse,
        Checker::FencedUpdate,
        Checker::EnforceFence,
        Checker::FenceCheckOrFalse,
        Checker::FenceCheck,
    ];

    fn name(self) -> &'static str {
        match self {
            Checker::FencedUpdateOrFalse => "fenced_update_or_false",
            Checker::FencedUpdate => "fenced_update",
            Checker::EnforceFence => "enforce_fence",
            Checker::FenceCheckOrFalse => "fence_check_or_false",
            Checker::FenceCheck => "fence_check",
        }
    }
}

/// Which shared table a count goes to: its place and how its counters fold.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
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

/// A key's counts in this transaction, with the counters they touched.
struct Pending {
    values: [i64; COUNTERS],
    touched: u32,
}

thread_local! {
    /// The counts of this transaction, not yet folded into shared memory.
    static PENDING: RefCell<FxHashMap<(Kind, EntryKey), Pending>> = RefCell::new(FxHashMap::default());
}

/// Counting is on, and there is shared memory to count into.
fn counting() -> bool {
    settings::track() && NAMESPACES.table().is_some()
}

fn count_into(kind: Kind, key: EntryKey, number: usize, value: i64) {
    PENDING.with_borrow_mut(|pending| {
        let counted = pending.entry((kind, key)).or_insert(Pending {
            values: [0; COUNTERS],
            touched: 0,
        });
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
    // Limited per table and check, whatever row counts them ("other" too); without shared
    // memory there is nothing to limit the rate with: every refusal is a line.
    let unlogged = match shared::log_limits() {
        None => 0,
        Some(limits) => match limits.due(key, now, LOG_INTERVAL_MICROS) {
            Some(unlogged) => unlogged,
            None => return,
        },
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

/// Folds this transaction's counts into shared memory (at every transaction's end).
fn fold_pending() {
    let pending = PENDING.with_borrow_mut(std::mem::take);
    if pending.is_empty() {
        return;
    }
    for kind in [Kind::Namespaces, Kind::Refusals] {
        let Some(table) = kind.place().table() else {
            continue;
        };
        let counts: Vec<Counts> = (pending.iter())
            .filter(|((of, _), _)| *of == kind)
            .map(|((_, key), counted)| Counts {
                key: *key,
                values: &counted.values,
                touched: counted.touched,
            })
            .collect();
        if !counts.is_empty() {
            table.fold_all(kind.folds(), &counts);
        }
    }
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
    kind: Kind,
    width: usize,
    times: &[usize],
) -> Vec<(EntryKey, Vec<i64>, Vec<Option<TimestampWithTimeZone>>)> {
    let table = kind.place().table().expect("tables() found it");
    let own = database();
    // Rows of what is gone are freed first: of a dropped database, and (what only this
    // database's catalog can tell) of a dropped table of this database.
    table.free(|[database, object, _]| {
        !exists(pg_sys::SysCacheIdentifier::DATABASEOID, database)
            || (kind == Kind::Refusals
                && database == own
                && !exists(pg_sys::SysCacheIdentifier::RELOID, object))
    });
    let every = sees_every_database();
    (table.rows().into_iter())
        .filter(|(key, _)| every || key[0] == own)
        .map(|(key, counters)| {
            let counters = counters[..width].to_vec();
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

/// Whether the catalog `cache` has a row of `oid` (0: the key of no object, kept).
fn exists(cache: pg_sys::SysCacheIdentifier::Type, oid: u32) -> bool {
    let zero = pg_sys::Datum::from(0);
    oid == 0
        || unsafe {
            pg_sys::SearchSysCacheExists(cache as _, pg_sys::Datum::from(oid), zero, zero, zero)
        }
}

fn timestamp(micros: i64) -> Option<TimestampWithTimeZone> {
    unsafe { TimestampWithTimeZone::from_datum(pg_sys::Datum::from(micros), false) }
}

/// fenced_lock_stats' rows: database (NULL for "other"), namespace (NULL for the database's
/// own row and "other"), the counters in `Count`'s order, the last failover skip's and
/// advance's times, and when they were last reset.
#[allow(clippy::type_complexity)] // pgrx needs table rows spelled out
#[pg_extern(volatile, parallel_restricted, schema = "fenced_lock_internal")]
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
    let rows = visible_rows(Kind::Namespaces, COUNTERS, &times)
        .into_iter()
        .map(move |([database, object, detail], counters, times)| {
            let dbid = (database != 0).then(|| pg_sys::Oid::from(database));
            let ns = (detail == NAMESPACE_ROW).then_some(object as i32);
            (dbid, ns, counters, times, reset)
        });
    TableIterator::new(rows.collect::<Vec<_>>())
}

/// fenced_lock_refusals' rows: database and table (NULL for "other"), check, the counters in
/// `RefusalCount`'s order, the last refusal's and acceptance's times, and when they were last
/// reset.
#[allow(clippy::type_complexity)] // pgrx needs table rows spelled out
#[pg_extern(volatile, parallel_restricted, schema = "fenced_lock_internal")]
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
    let rows = visible_rows(Kind::Refusals, REFUSAL_FOLDS.len(), &times)
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

/// Frees every row of both views (and zeroes "other"), in every database; when. For the
/// extension's owner (EXECUTE is revoked from PUBLIC; it can be granted).
#[pg_extern(volatile, parallel_unsafe)]
fn fenced_lock_stats_reset() -> Option<TimestampWithTimeZone> {
    let (namespaces, refusals) = tables("fenced_lock_stats");
    // This backend's own counts so far go with the rest.
    PENDING.with_borrow_mut(|pending| pending.clear());
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    namespaces.reset(now);
    refusals.reset(now);
    timestamp(now)
}
