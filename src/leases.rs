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

use crate::errors::{refuse_in_parallel_mode, FencedError, OrRaise};
use crate::locking::key_forms;
use crate::shmem::Part;
use crate::spi::{self, SavedPlan};
use crate::types::{required, LockKey};
use crate::{extension, settings, tokens};
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::prelude::*;

const LEASE_TABLE: &std::ffi::CStr = c"fenced_lease_state";

/// How many condition variables waiting acquires sleep on; a key maps to one of them.
const WAKEUP_CHANNELS: usize = 64;

/// Without the shared condition variables (not preloaded), a waiting acquire looks again this
/// often (ms), besides at the holder's expiry.
const UNPRELOADED_RECHECK_MS: i64 = 100;

/// A waiting acquire looks again at least this often (ms) even when preloaded: a release
/// committed by COMMIT PREPARED, in another session, broadcasts nothing.
const RECHECK_MS: i64 = 1000;

/// A waiting acquire that found the lease row locked by another open transaction (which is
/// taking, renewing or releasing it) looks again this often (ms): row locks are not waited
/// for, so that no acquire waits past its `wait`.
const ROW_LOCKED_RECHECK_MS: i64 = 10;

/// Released leases, and leases expired longer ago than this, are deleted by later first
/// leases of other keys (`sweep`), so that the table does not grow without bound.
const RETENTION: &str = "1 hour";

/// Every SWEEP_EVERY-th first lease of a key in a backend sweeps SWEEP_PAGES table pages for
/// such rows: more rows than those first leases add (a page holds at least a dozen lease rows
/// of the longest owner and key), in one statement rather than one per first lease.
const SWEEP_EVERY: u32 = 16;
const SWEEP_PAGES: u32 = 2 * SWEEP_EVERY;

/// The longest key text a lease keeps (bytes); owners are bounded by `locking::owner_argument`.
const MAX_KEY_BYTES: usize = crate::locking::MAX_IDENTIFIER_BYTES;

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
    // A prepared transaction's releases are committed later by COMMIT PREPARED, perhaps in
    // another session, which broadcasts nothing: waiters look again within RECHECK_MS. Its
    // wakeups must not go to this session's next commit.
    let ended = matches!(
        event,
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE
    );
    if committed || ended {
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

/// The statements that write the lease table (its rows are found by `find`, without SPI).
/// Every name is qualified (operators and functions with pg_catalog, the table with its
/// schema): they run as the table's owner with the caller's search_path, which a re-analysis
/// by the plan cache would use.
struct Statements {
    /// Where the table's columns are, for `find`.
    columns: Columns,
    /// Extends this owner's lease: its token.
    extend: SavedPlan,
    /// Gives the lease to a new holder.
    take: SavedPlan,
    /// The first lease of a key: its token, or no row when a concurrent first lease won.
    insert: SavedPlan,
    /// Renews the lease at a ctid, locked by `lock_held`: the new expiry.
    renew: SavedPlan,
    /// Releases the lease at a ctid, locked by `lock_held`.
    release: SavedPlan,
    /// The ctids of released and long-expired leases on a range of table pages.
    sweepable: SavedPlan,
}

impl Statements {
    /// The statements for the lease table `table`; `with_lock_delay` when it has the
    /// lock_delay column (0.3.0's): a server whose library is new but whose extension is not
    /// yet updated (ALTER EXTENSION fenced_lock UPDATE) keeps working, without a delay.
    fn prepare(table_oid: pg_sys::Oid, table: &str, with_lock_delay: bool) -> Statements {
        use pg_sys::{INT4OID, INT8OID, INTERVALOID, REGROLEOID, TEXTOID, TIDOID};
        let key = "ns OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.=) $2";
        let now = "pg_catalog.clock_timestamp()";
        // One reading of the clock for every timestamp a statement writes.
        let clock = "(SELECT pg_catalog.clock_timestamp() AS now) AS clock";
        // When a lease that expires unreleased is free for another owner: after its lock-delay.
        // Without the column, the delay parameters are left unused.
        let available_at = match with_lock_delay {
            true => "(expires_at OPERATOR(pg_catalog.+) lock_delay)",
            false => "expires_at",
        };
        let set_delay = |parameter: u32| match with_lock_delay {
            true => format!(", lock_delay = ${parameter}"),
            false => String::new(),
        };
        let (delay_column, delay_value) = match with_lock_delay {
            true => (", lock_delay", ", $8"),
            false => ("", ""),
        };
        // The parameters of a new holder's row: key, owner, role, token, key text, TTL,
        // lock-delay.
        let new_holder = [
            INT4OID,
            INT4OID,
            TEXTOID,
            REGROLEOID,
            INT8OID,
            TEXTOID,
            INTERVALOID,
            INTERVALOID,
        ];
        Statements {
            columns: Columns::of(table_oid, with_lock_delay),
            extend: spi::prepare(
                &format!(
                    "UPDATE {table} SET renewed_at = clock.now, \
                            expires_at = clock.now OPERATOR(pg_catalog.+) $3{} \
                       FROM {clock} WHERE {key} RETURNING token",
                    set_delay(4)
                ),
                &[INT4OID, INT4OID, INTERVALOID, INTERVALOID],
            ),
            take: spi::prepare(
                &format!(
                    "UPDATE {table} SET owner = $3, holder = $4, token = $5, key = $6, \
                            acquired_at = clock.now, renewed_at = clock.now, \
                            expires_at = clock.now OPERATOR(pg_catalog.+) $7{} \
                       FROM {clock} WHERE {key}",
                    set_delay(8)
                ),
                &new_holder,
            ),
            insert: spi::prepare(
                &format!(
                    "INSERT INTO {table} (ns, id, owner, holder, token, key, acquired_at, \
                                          renewed_at, expires_at{delay_column}) \
                     SELECT $1, $2, $3, $4, $5, $6, clock.now, clock.now, \
                            clock.now OPERATOR(pg_catalog.+) $7{delay_value} FROM {clock} \
                     ON CONFLICT (ns, id) DO NOTHING RETURNING token"
                ),
                &new_holder,
            ),
            renew: spi::prepare(
                &format!(
                    "UPDATE {table} SET renewed_at = clock.now, \
                            expires_at = clock.now OPERATOR(pg_catalog.+) $2{} \
                       FROM {clock} WHERE ctid OPERATOR(pg_catalog.=) $1 RETURNING expires_at",
                    set_delay(3)
                ),
                &[TIDOID, INTERVALOID, INTERVALOID],
            ),
            release: spi::prepare(
                &format!(
                    "UPDATE {table} SET owner = NULL, holder = NULL, renewed_at = NULL, \
                            expires_at = NULL \
                      WHERE ctid OPERATOR(pg_catalog.=) $1"
                ),
                &[TIDOID],
            ),
            sweepable: spi::prepare(
                &format!(
                    "SELECT ctid FROM {table} \
                      WHERE ctid OPERATOR(pg_catalog.>=) \
                                pg_catalog.format('(%s,0)', $1)::pg_catalog.tid \
                        AND ctid OPERATOR(pg_catalog.<) \
                                pg_catalog.format('(%s,0)', $2)::pg_catalog.tid \
                        AND (owner IS NULL OR {available_at} OPERATOR(pg_catalog.<) \
                             ({now} OPERATOR(pg_catalog.-) '{RETENTION}'::pg_catalog.interval))"
                ),
                &[INT8OID, INT8OID],
            ),
        }
    }

    fn free(self) {
        [
            self.extend,
            self.take,
            self.insert,
            self.renew,
            self.release,
            self.sweepable,
        ]
        .into_iter()
        .for_each(SavedPlan::free);
    }
}

/// What the statements were prepared for: the lease table's OID, and whether it has the
/// lock_delay column.
type PreparedFor = (pg_sys::Oid, bool);

thread_local! {
    /// The statements, prepared for the lease table with this OID, with or without its
    /// lock_delay column (a new table, after DROP and CREATE EXTENSION, or the column added by
    /// the upgrade, gets new ones).
    static STATEMENTS: std::cell::RefCell<Option<(PreparedFor, std::rc::Rc<Statements>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `work` with the lease table's statements and the open table, as the table's owner
/// (extension::as_owner_of), inside an SPI connection; `work` also gets the caller's role. On
/// an ERROR the abort closes the connection and the table.
fn as_table_owner<R>(
    fcinfo: pg_sys::FunctionCallInfo,
    work: impl FnOnce(&Statements, pg_sys::Relation, pg_sys::Oid) -> R,
) -> R {
    let table_oid = extension::relation(fcinfo, LEASE_TABLE);
    // Open for `find`, `lock_row` and the sweep, which read and write the heap directly: with
    // the lock the statements' writes take, held to the transaction's end, as theirs are.
    let table = unsafe { pg_sys::relation_open(table_oid, pg_sys::RowExclusiveLock as _) };
    // ALTER EXTENSION fenced_lock UPDATE adds the column under running sessions.
    let with_lock_delay = unsafe { pg_sys::get_attnum(table_oid, c"lock_delay".as_ptr()) } > 0;
    let prepared_for: PreparedFor = (table_oid, with_lock_delay);
    extension::as_owner_of(table_oid, |caller| {
        spi::connected(|| {
            let statements = STATEMENTS.with_borrow_mut(|cached| match cached {
                Some((key, statements)) if *key == prepared_for => statements.clone(),
                _ => {
                    let table = extension::qualified(fcinfo, LEASE_TABLE);
                    let fresh =
                        std::rc::Rc::new(Statements::prepare(table_oid, &table, with_lock_delay));
                    if let Some((_, stale)) = cached.replace((prepared_for, fresh.clone())) {
                        if let Ok(stale) = std::rc::Rc::try_unwrap(stale) {
                            stale.free();
                        }
                    }
                    fresh
                }
            });
            let result = work(&statements, table, caller);
            unsafe { pg_sys::relation_close(table, pg_sys::NoLock as _) };
            result
        })
    })
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

/// The lock-delay recorded with a lease this session acquires or renews
/// (fenced_lock.lease_lock_delay).
fn lock_delay() -> Interval {
    Interval::from_micros(settings::lease_lock_delay_ms() * 1000)
}

/// The lease's state before an acquire, seen by one statement.
enum Seen {
    /// Taken (new token) or extended (same token): the token.
    Granted(i64),
    /// Held by another owner until this many microseconds from now.
    Held { expires_in_us: i64 },
}

/// The first column of the first row the last statement returned, read as `T`.
fn first<T: FromDatum>() -> Option<T> {
    SavedPlan::first_value().and_then(|datum| unsafe { T::from_datum(datum, false) })
}

/// One attempt: the lease if it is free, expired, or held by `owner` (and the caller's role).
#[allow(clippy::too_many_arguments)]
fn attempt(
    statements: &Statements,
    table: pg_sys::Relation,
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    role: pg_sys::Oid,
    keyed: &crate::locking::Keyed,
    owner: &str,
    ttl: Interval,
    waiting: bool,
) -> Seen {
    let (ns, id) = (keyed.key.ns.into_datum(), keyed.key.id.into_datum());
    let (label, ttl) = (keyed.label.as_deref().into_datum(), ttl.into_datum());
    let delay = lock_delay().into_datum();
    // The parameters of `take` and `insert`: the new holder's row.
    let new_holder = |token: i64| {
        let (owner, role) = (owner.into_datum(), role.into_datum());
        [ns, id, owner, role, token.into_datum(), label, ttl, delay]
    };
    loop {
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        let this_owners =
            |row: &LeaseRow| row.owner.as_deref() == Some(owner) && row.held_for(role);
        // Free, expired, or this owner's: locked as seen, so that a look that changes nothing
        // never stands in the holder's way.
        let takeable = |row: &LeaseRow| {
            row.owner.is_none() || this_owners(row) || row.available_at.is_some_and(|at| at <= now)
        };
        match lock_found(table, &statements.columns, function, keyed.key, takeable) {
            // Still held by this owner: the same token, the TTL extended.
            Found::Locked(row)
                if this_owners(&row) && row.expires_at.is_some_and(|at| at > now) =>
            {
                statements.extend.execute(&[ns, id, ttl, delay]);
                return Seen::Granted(first::<i64>().unwrap_or_default());
            }
            // Free, expired, or this owner's after expiry: drawn under the row lock, after
            // every token of earlier holders, the token of a new grant.
            Found::Locked(_) => {
                let token = tokens::next_token(fcinfo);
                statements.take.execute(&new_holder(token));
                return Seen::Granted(token);
            }
            // Held by another owner (until its expiry and lock-delay). Only a waiting acquire
            // needs to know until when (0 or less: look again soon).
            Found::Refused(row) => {
                let expires_in_us = match waiting {
                    true => row.available_at.map_or(0, |at| at - now),
                    false => 0,
                };
                return Seen::Held { expires_in_us };
            }
            // Locked by another open transaction: look again soon.
            Found::Busy => return Seen::Held { expires_in_us: 0 },
            Found::Absent => {}
        }
        // No row: the key was never leased, or its row was swept. A first lease being written
        // by another open transaction would make the insert wait for it: that one holds the
        // key's insert lock until it ends, and then the lease reads as busy.
        if !lock_first_lease(keyed.key) {
            return Seen::Held { expires_in_us: 0 };
        }
        sweep_now_and_then(statements, table);
        // Tokens only rise: one drawn now is above every earlier holder's, swept rows' too.
        let token = tokens::next_token(fcinfo);
        statements.insert.execute(&new_holder(token));
        if first::<i64>().is_some() {
            return Seen::Granted(token);
        }
    }
}

/// Where the lease table's columns are (attribute numbers, from 1): read by name, since the
/// upgrade adds lock_delay at the end and a dropped column keeps its number.
struct Columns {
    ns: i16,
    id: i16,
    owner: i16,
    holder: i16,
    token: i16,
    expires_at: i16,
    lock_delay: Option<i16>,
}

impl Columns {
    fn of(table: pg_sys::Oid, with_lock_delay: bool) -> Columns {
        let number = |name: &std::ffi::CStr| unsafe { pg_sys::get_attnum(table, name.as_ptr()) };
        Columns {
            ns: number(c"ns"),
            id: number(c"id"),
            owner: number(c"owner"),
            holder: number(c"holder"),
            token: number(c"token"),
            expires_at: number(c"expires_at"),
            lock_delay: with_lock_delay.then(|| number(c"lock_delay")),
        }
    }
}

/// A lease's row, as a statement run now would see it.
struct LeaseRow {
    ctid: pg_sys::ItemPointerData,
    owner: Option<String>,
    /// The role that took it (InvalidOid for none).
    holder: pg_sys::Oid,
    token: i64,
    expires_at: Option<pg_sys::TimestampTz>,
    /// When another owner may take it, if it expires unreleased: its expiry plus its
    /// lock-delay.
    available_at: Option<pg_sys::TimestampTz>,
}

impl LeaseRow {
    /// Whether `role` may act for the lease's holder: it is that role, or has its privileges
    /// (as `pg_has_role(role, holder, 'USAGE')`).
    fn held_for(&self, role: pg_sys::Oid) -> bool {
        self.holder != pg_sys::InvalidOid && unsafe { pg_sys::has_privs_of_role(role, self.holder) }
    }
}

/// The row of the lease on `key`, read through the table's primary key without SPI, with what
/// a statement run now would see: a new snapshot under READ COMMITTED (the transaction's
/// under REPEATABLE READ and SERIALIZABLE), after a command-counter increment, so this
/// transaction's earlier lease writes are seen too (as SPI does before every statement).
fn find(table: pg_sys::Relation, columns: &Columns, key: LockKey) -> Option<LeaseRow> {
    unsafe {
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        pg_sys::CommandCounterIncrement();
        pg_sys::UpdateActiveSnapshotCommandId();
        let mut keys: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
        for (scan_key, (column, value)) in keys
            .iter_mut()
            .zip([(columns.ns, key.ns), (columns.id, key.id)])
        {
            pg_sys::ScanKeyInit(
                scan_key,
                column,
                pg_sys::BTEqualStrategyNumber as _,
                pg_sys::Oid::from(pg_sys::F_INT4EQ),
                pg_sys::Datum::from(value),
            );
        }
        // The primary key's index as the relation cache knows it now (REINDEX CONCURRENTLY
        // gives it a new OID); without one, a scan of the table.
        pg_sys::list_free(pg_sys::RelationGetIndexList(table));
        let index = (*table).rd_pkindex;
        let scan = pg_sys::systable_beginscan(
            table,
            index,
            index != pg_sys::InvalidOid,
            pg_sys::GetActiveSnapshot(),
            keys.len() as _,
            keys.as_mut_ptr(),
        );
        let tuple = pg_sys::systable_getnext(scan);
        let row = (!tuple.is_null()).then(|| {
            let descriptor = (*table).rd_att;
            let width = (*descriptor).natts as usize;
            let (mut values, mut nulls) = (vec![pg_sys::Datum::from(0); width], vec![false; width]);
            pg_sys::heap_deform_tuple(tuple, descriptor, values.as_mut_ptr(), nulls.as_mut_ptr());
            let column = |number: i16| {
                let index = number as usize - 1;
                (!nulls[index]).then_some(values[index])
            };
            let expires_at = column(columns.expires_at).map(|at| at.value() as i64);
            // Read while the tuple's buffer is still pinned: an interval is passed by reference.
            let available_at = match columns.lock_delay.and_then(column) {
                Some(delay) => column(columns.expires_at).and_then(|at| {
                    pgrx::direct_function_call::<i64>(
                        pg_sys::timestamptz_pl_interval,
                        &[Some(at), Some(delay)],
                    )
                }),
                None => expires_at,
            };
            LeaseRow {
                ctid: (*tuple).t_self,
                owner: column(columns.owner).and_then(|owner| String::from_datum(owner, false)),
                holder: column(columns.holder).map_or(pg_sys::InvalidOid, |holder| {
                    pg_sys::Oid::from(holder.value() as u32)
                }),
                token: column(columns.token).map_or(0, |token| token.value() as i64),
                expires_at,
                available_at,
            }
        });
        pg_sys::systable_endscan(scan);
        pg_sys::PopActiveSnapshot();
        row
    }
}

/// The row id in column `column` (from 1) of row `row` (from 0) the last statement returned.
fn ctid(row: u64, column: i32) -> Option<pg_sys::ItemPointerData> {
    SavedPlan::value(row, column)
        .map(|datum| unsafe { *(datum.cast_mut_ptr::<pg_sys::ItemPointerData>()) })
}

/// Locks the row of the lease on `key` held with `token` by `role` (or a role it is a member
/// of) as `lock_row` does: its ctid, or None when no lease is held with that token. Never
/// waits (55P03: the caller must hear that it could not look), and never locks a row it does
/// not then write: a row that fails a recheck after a concurrent takeover would stay locked,
/// as `FOR UPDATE` in the statement would leave it, and the new holder could not renew.
fn lock_held(
    statements: &Statements,
    table: pg_sys::Relation,
    function: &'static str,
    key: LockKey,
    token: i64,
    role: pg_sys::Oid,
) -> Option<pg_sys::ItemPointerData> {
    let held = |row: &LeaseRow| row.token == token && row.owner.is_some() && row.held_for(role);
    match lock_found(table, &statements.columns, function, key, held) {
        Found::Locked(row) => Some(row.ctid),
        Found::Busy => FencedError::LeaseRowBusy { function, key }.raise(),
        Found::Absent | Found::Refused(_) => None,
    }
}

/// What `lock_found` found.
enum Found {
    /// The key has no row.
    Absent,
    /// A row `wanted` refused, unlocked.
    Refused(LeaseRow),
    /// A row `wanted` accepted, locked by another open transaction.
    Busy,
    /// A row `wanted` accepted, locked by this transaction as it was seen.
    Locked(LeaseRow),
}

/// The row of the lease on `key`, locked (`lock_row`) only when `wanted` accepts it as seen, so
/// that a caller that only looks never stands in the holder's way. A row changed after the
/// look's snapshot is looked at again with a newer one, unless the transaction reads one
/// snapshot throughout: then 40001 (a look again would see the same row).
fn lock_found(
    table: pg_sys::Relation,
    columns: &Columns,
    function: &'static str,
    key: LockKey,
    wanted: impl Fn(&LeaseRow) -> bool,
) -> Found {
    loop {
        let Some(row) = find(table, columns, key) else {
            return Found::Absent;
        };
        if !wanted(&row) {
            return Found::Refused(row);
        }
        match lock_row(table, row.ctid) {
            RowLock::Locked => return Found::Locked(row),
            RowLock::Busy => return Found::Busy,
            RowLock::Changed if transaction_snapshot() => {
                FencedError::LeaseChangedAfterSnapshot { function, key }.raise()
            }
            RowLock::Changed => continue,
        }
    }
}

/// What `lock_row` found.
enum RowLock {
    /// The row is locked by this transaction, as its statement saw it.
    Locked,
    /// Another open transaction has locked or is changing the row.
    Busy,
    /// The row was changed or deleted by a transaction that committed after the statement's
    /// snapshot.
    Changed,
}

/// Locks the row version at `ctid` FOR UPDATE without waiting, and only that version.
/// `FOR UPDATE SKIP LOCKED` in the statement would lock the newer version when a takeover
/// committed meanwhile, and keep it locked even after that version fails the
/// recheck (PostgreSQL's rule): a caller that only looked would then hold the new holder's
/// row until its transaction ended, and the holder's release would fail with 55P03.
fn lock_row(table: pg_sys::Relation, ctid: pg_sys::ItemPointerData) -> RowLock {
    use pg_sys::TM_Result;
    unsafe {
        let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
        tuple.t_self = ctid;
        let mut buffer: pg_sys::Buffer = pg_sys::InvalidBuffer as _;
        let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
        let result = pg_sys::heap_lock_tuple(
            table,
            &mut tuple,
            pg_sys::GetCurrentCommandId(true),
            pg_sys::LockTupleMode::LockTupleExclusive,
            pg_sys::LockWaitPolicy::LockWaitSkip,
            false,
            &mut buffer,
            &mut failure,
        );
        if buffer != pg_sys::InvalidBuffer as pg_sys::Buffer {
            pg_sys::ReleaseBuffer(buffer);
        }
        match result {
            TM_Result::TM_Ok => RowLock::Locked,
            TM_Result::TM_WouldBlock | TM_Result::TM_BeingModified => RowLock::Busy,
            _ => RowLock::Changed,
        }
    }
}

/// A read-only transaction (a hot standby's too) writes no lease: 25006 before looking, as
/// PostgreSQL refuses an UPDATE before it finds a row, so that no answer depends on what a
/// look found (a lease held by another owner would read as busy, one lost as lost).
fn refuse_read_only(function: &'static str) {
    if unsafe { pg_sys::XactReadOnly } {
        FencedError::ReadOnlyLease { function }.raise();
    }
}

/// Whether the transaction reads one snapshot throughout (REPEATABLE READ or SERIALIZABLE):
/// then a statement run again sees the same rows.
fn transaction_snapshot() -> bool {
    unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 }
}

/// The transaction-level lock that orders the first leases of `key` (an advisory lock tag of
/// its own: objsubid 3 in pg_locks), taken without waiting: false when another open
/// transaction is writing the key's first lease.
fn lock_first_lease(key: LockKey) -> bool {
    let tag = pg_sys::LOCKTAG {
        locktag_field4: 3,
        ..key.locktag()
    };
    unsafe {
        pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as _, false, true)
            != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
    }
}

thread_local! {
    /// The table page this backend's next sweep starts at (backends start at different pages),
    /// and the first leases it took since its last sweep.
    static NEXT_SWEEP: std::cell::Cell<(Option<u32>, u32)> = const { std::cell::Cell::new((None, 0)) };
}

/// Deletes the released and long-expired (RETENTION) leases on the next SWEEP_PAGES pages of
/// the table, at this backend's first first lease and every SWEEP_EVERY-th after it, skipping
/// rows that other transactions have locked or changed (`lock_row`). First leases sweep more
/// than they add, so dead rows cannot pile up, and no background worker is needed.
fn sweep_now_and_then(statements: &Statements, table: pg_sys::Relation) {
    let (next_page, since_sweep) = NEXT_SWEEP.get();
    if since_sweep % SWEEP_EVERY != 0 {
        NEXT_SWEEP.set((next_page, since_sweep + 1));
        return;
    }
    let pages =
        unsafe { pg_sys::RelationGetNumberOfBlocksInFork(table, pg_sys::ForkNumber::MAIN_FORKNUM) };
    if pages == 0 {
        return;
    }
    let start = match pages > SWEEP_PAGES {
        true => next_page.unwrap_or(unsafe { pg_sys::MyProcPid } as u32) % pages,
        false => 0,
    };
    NEXT_SWEEP.set((Some(start + SWEEP_PAGES), 1));
    let end = start as i64 + SWEEP_PAGES as i64;
    let rows = statements
        .sweepable
        .execute(&[(start as i64).into_datum(), end.into_datum()]);
    let rows: Vec<pg_sys::ItemPointerData> = (0..rows).filter_map(|row| ctid(row, 1)).collect();
    for mut row in rows {
        if let RowLock::Locked = lock_row(table, row) {
            unsafe { pg_sys::simple_heap_delete(table, &mut row) };
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
    let owner = crate::locking::owner_argument(owner, function);
    if keyed
        .label
        .as_ref()
        .is_some_and(|key| key.len() > MAX_KEY_BYTES)
    {
        FencedError::ValueTooLong {
            function,
            argument: "key",
            limit: MAX_KEY_BYTES,
        }
        .raise();
    }
    let ttl = positive(ttl, function, "ttl");
    crate::locking::refuse_on_hot_standby();
    refuse_read_only(function);
    refuse_in_parallel_mode(function);
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
        let seen = as_table_owner(fcinfo, |statements, table, role| {
            attempt(
                statements,
                table,
                fcinfo,
                function,
                role,
                &keyed,
                owner,
                ttl,
                deadline.is_some(),
            )
        });
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
        // Until the holder's expiry (then the lease can be taken over), the deadline or
        // RECHECK_MS, whichever is first; a release wakes the sleeper earlier. A row locked by
        // another open transaction is looked at again soon.
        let until_expiry_ms = match expires_in_us {
            1.. => (expires_in_us + 999) / 1000,
            _ => ROW_LOCKED_RECHECK_MS,
        };
        let mut sleep_ms = ((left_us + 999) / 1000)
            .min(until_expiry_ms)
            .min(RECHECK_MS);
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

// Extends the lease held with `token` to `ttl` from now: the new expiry, or NULL when the
// lease is lost (taken over after expiry, released, or never held with that token). A lease
// that expired but was not taken over is still this token's, and is renewed.
key_forms! {
    names: ["renew_lease", "renew_lease_named", "renew_lease_named_bigint"],
    rust: [renew_lease, renew_lease_named, renew_lease_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (token: Option<i64>, ttl: Option<Interval>),
    returns: Option<TimestampWithTimeZone>,
    |fcinfo, function, keyed| {
        let token = required(token, function, "token").or_raise();
        let ttl = positive(ttl, function, "ttl");
        refuse_read_only(function);
        refuse_in_parallel_mode(function);
        as_table_owner(fcinfo, |statements, table, role| {
            let mut row = lock_held(statements, table, function, keyed.key, token, role)?;
            statements.renew.execute(&[
                Some(pg_sys::Datum::from(&raw mut row)),
                ttl.into_datum(),
                lock_delay().into_datum(),
            ]);
            first::<TimestampWithTimeZone>()
        })
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
        refuse_read_only(function);
        refuse_in_parallel_mode(function);
        let released = as_table_owner(fcinfo, |statements, table, role| {
            lock_held(statements, table, function, keyed.key, token, role).is_some_and(|mut row| {
                statements
                    .release
                    .execute(&[Some(pg_sys::Datum::from(&raw mut row))])
                    == 1
            })
        });
        if released {
            if let Some(channel) = wakeup_channel(keyed.key) {
                RELEASED_CHANNELS.with_borrow_mut(|channels| channels.push(channel));
            }
        }
        released
    },
}
