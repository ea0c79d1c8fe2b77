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

/// How a backend's count joins the shared one.
#[derive(Clone, Copy)]
pub enum Fold {
    Sum,
    Max,
    /// The latest value replaces the shared one.
    Last,
}

/// How a view's column reads a counter.
#[derive(Clone, Copy, PartialEq)]
enum Read {
    /// As it is.
    Count,
    /// Microseconds, shown as milliseconds.
    Millis,
    /// NULL for 0 (no timeline, no token yet).
    NullIfZero,
    /// Microseconds since PostgreSQL's epoch, shown as a timestamp (NULL for never).
    Time,
}

/// The counters of one view, each defined once: the variant that counts it, how backends'
/// counts fold into the shared one, and its column of the view, whose SQL is made from this
/// list (`fenced_lock_columns`), in this order.
macro_rules! counters {
    (
        $(#[$doc:meta])*
        enum $name:ident in $view:literal, folds $folds:ident, columns $columns:ident {
            $($variant:ident: $fold:ident, $read:ident => $column:literal,)*
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        #[allow(dead_code)] // some are only read as a column
        pub enum $name {
            $($variant,)*
        }

        const $folds: [Fold; [$($column),*].len()] = [$(Fold::$fold,)*];

        const $columns: Columns = Columns {
            view: $view,
            columns: &[$(($column, Read::$read),)*],
        };
    };
}

counters! {
    /// A namespace's counters (and a database's). Times are microseconds since PostgreSQL's
    /// epoch (TimestampTz), durations microseconds.
    enum Count in "fenced_lock_stats", folds NAMESPACE_FOLDS, columns NAMESPACE_COLUMNS {
        AcquiredImmediately: Sum, Count => "acquired_immediately",
        AcquiredAfterWait: Sum, Count => "acquired_after_wait",
        WaitMicros: Sum, Millis => "wait_time",
        MaxWaitMicros: Max, Millis => "max_wait_time",
        Busy: Sum, Count => "busy",
        LockTimeouts: Sum, Count => "lock_timeouts",
        Timeouts: Sum, Count => "timeouts",
        Deadlocks: Sum, Count => "deadlocks",
        TokensIssued: Sum, Count => "tokens_issued",
        SessionGrants: Sum, Count => "session_grants",
        LeaderTerms: Sum, Count => "leader_terms",
        LeasesAcquired: Sum, Count => "leases_acquired",
        LeasesRenewed: Sum, Count => "leases_renewed",
        LeasesReleased: Sum, Count => "leases_released",
        LeasesTakenOver: Sum, Count => "leases_taken_over",
        LeasesDelayed: Sum, Count => "leases_delayed",
        ForceReleases: Sum, Count => "force_released",
        FailoverSkips: Sum, Count => "failover_skips",
        LastSkipTimeline: Last, NullIfZero => "last_failover_skip_timeline",
        LastSkipAt: Max, Time => "last_failover_skip_at",
        TokenAdvances: Sum, Count => "token_advances",
        LastAdvanceTimeline: Last, NullIfZero => "last_token_advance_timeline",
        LastAdvanceAt: Max, Time => "last_token_advance_at",
    }
}

counters! {
    /// A table's and check's counters.
    enum RefusalCount in "fenced_lock_refusals", folds REFUSAL_FOLDS, columns REFUSAL_COLUMNS {
        Refused: Sum, Count => "refused",
        LastRefusedToken: Last, NullIfZero => "last_refused_token",
        LastRefusedAt: Max, Time => "last_refused_at",
        Accepted: Sum, Count => "accepted",
        LastAcceptedToken: Last, NullIfZero => "last_accepted_token",
        HighestAccepted: Max, NullIfZero => "highest_accepted_token",
        LastAcceptedAt: Max, Time => "last_accepted_at",
    }
}

/// Counters per entry (the namespace table's; the refusal table uses the first few).
pub const COUNTERS: usize = NAMESPACE_FOLDS.len();

/// A view's counter columns, in order.
struct Columns {
    view: &'static str,
    columns: &'static [(&'static str, Read)],
}

impl Columns {
    /// The counters shown as timestamps, by position: the rows function returns them apart.
    fn times(&self) -> Vec<usize> {
        (self.columns.iter().enumerate())
            .filter(|(_, (_, read))| *read == Read::Time)
            .map(|(at, _)| at)
            .collect()
    }

    /// The view's select list for the counters, over its rows function's row `s`:
    /// `s.counters[n]` (1-based, as SQL arrays), `s.times[m]` for the timestamps.
    fn select_list(&self) -> String {
        let mut times = 0;
        (self.columns.iter().enumerate())
            .map(|(at, &(column, read))| {
                let counter = format!("s.counters[{}]", at + 1);
                let expression = match read {
                    Read::Count => counter,
                    Read::Millis => format!("{counter} / 1000.0::float8"),
                    Read::NullIfZero => format!("NULLIF({counter}, 0)"),
                    Read::Time => {
                        times += 1;
                        format!("s.times[{times}]")
                    }
                };
                format!("{expression} AS {column}")
            })
            .collect::<Vec<_>>()
            .join(",\n       ")
    }
}

/// The counter columns of `view` (fenced_lock_stats or fenced_lock_refusals) as its select
/// list: the install and upgrade scripts build the views from it, so that each counter is
/// defined once, in `counters!`. Not for PUBLIC.
#[pg_extern(immutable, parallel_safe, schema = "fenced_lock_internal")]
fn fenced_lock_columns(view: &str) -> String {
    [NAMESPACE_COLUMNS, REFUSAL_COLUMNS]
        .into_iter()
        .find(|columns| columns.view == view)
        .unwrap_or_else(|| {
            FencedError::InvalidArgument {
                message: format!("fenced_lock_columns: no counter view \"{view}\""),
                hint: None,
            }
            .raise()
        })
        .select_list()
}

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
/// own row and "other"), the counters in `Count`'s order, those read as times again as
/// timestamps, and when they were last reset.
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
    let times = NAMESPACE_COLUMNS.times();
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
/// `RefusalCount`'s order, those read as times again as timestamps, and when they were last
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
    let times = REFUSAL_COLUMNS.times();
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

#[cfg(test)]
mod tests {
    use super::{NAMESPACE_COLUMNS, REFUSAL_COLUMNS};

    // The views' SQL, as 0.4.0's scripts wrote it by hand: an upgraded database keeps it.
    #[test]
    fn the_select_lists_read_each_counter_by_its_position() {
        let stats = NAMESPACE_COLUMNS.select_list();
        assert!(stats.starts_with("s.counters[1] AS acquired_immediately,"));
        assert!(stats.contains("s.counters[3] / 1000.0::float8 AS wait_time"));
        assert!(stats.contains("NULLIF(s.counters[19], 0) AS last_failover_skip_timeline"));
        assert!(stats.contains("s.times[1] AS last_failover_skip_at"));
        assert!(stats.ends_with("s.times[2] AS last_token_advance_at"));
        assert_eq!(NAMESPACE_COLUMNS.times(), [19, 22]);
        let refusals = REFUSAL_COLUMNS.select_list();
        assert!(refusals.contains("NULLIF(s.counters[6], 0) AS highest_accepted_token"));
        assert_eq!(REFUSAL_COLUMNS.times(), [2, 6]);
    }
}
