//! Table-backed leases: a key held by an owner (a client-chosen id) until a TTL on the
//! database's clock runs out, in `fenced_lease_state`. Every call is one statement that
//! commits with its transaction and ties nothing to the server session, so leases work through
//! transaction-mode poolers and serverless drivers, where session locks pass from client to
//! client. A new holder gets a new token from the same sequence as every other grant; an
//! expired lease is taken over by the next acquire (no background worker). Leases and advisory
//! locks are separate key spaces.
//!
//! The table is readable by all and written only here, straight to its heap and indexes, with
//! no SQL and no table rights of the caller (whose role is recorded: only it, or a member,
//! renews or releases). A waiting acquire sleeps on a
//! condition variable that releases broadcast (when preloaded), or until the holder's expiry.

use crate::compat::{self, IndexEntries};
use crate::errors::{refuse_in_parallel_mode, FencedError, OrRaise};
use crate::locking::key_forms;
use crate::shmem::Part;
use crate::types::{required, LockKey};
use crate::unguarded;
use crate::{extension, settings, tokens};
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys::{self, TM_Result};
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

/// Released leases, and leases available to others for longer than this (an hour, in
/// microseconds), are deleted by later first leases of other keys (`sweep_now_and_then`), so
/// that the table does not grow without bound.
const RETENTION_US: i64 = 3_600_000_000;

/// Every SWEEP_EVERY-th first lease of a key in a backend sweeps SWEEP_PAGES table pages for
/// such rows: more rows than those first leases add (a page holds at least a dozen lease rows
/// of the longest owner and key), in one scan rather than one per first lease.
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

/// What a backend keeps of the lease table between calls: its OID and where its columns are.
/// Forgotten when the relation cache says the table changed: the upgrade adds lock_delay under
/// running sessions (a server whose library is new but whose extension is not yet updated
/// keeps working, without a delay), and DROP and CREATE EXTENSION make a new table.
#[derive(Clone, Copy)]
struct Shape {
    oid: pg_sys::Oid,
    columns: Columns,
}

thread_local! {
    static SHAPE: std::cell::Cell<Option<Shape>> = const { std::cell::Cell::new(None) };
}

pub fn register_callbacks() {
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut());
        pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), 0.into());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    // InvalidOid means "every relation" (a cache reset).
    if SHAPE
        .get()
        .is_some_and(|shape| relid == pg_sys::InvalidOid || relid == shape.oid)
    {
        SHAPE.set(None);
    }
}

/// The lease table as one call uses it: open with its indexes, with the lock an UPDATE takes
/// (held to the transaction's end). Its rows are found through the primary key's index and
/// written to the heap and every index directly: no statement runs.
struct LeaseTable {
    heap: pg_sys::Relation,
    /// Every index of the table, open for `insert_row` and `update_row`.
    indexes: pg_sys::CatalogIndexState,
    /// The primary key's index, among `indexes`; null without one (then a table scan finds a
    /// key's row).
    key_index: pg_sys::Relation,
    columns: Columns,
}

/// Each index of `indexes` (from CatalogOpenIndexes) with its IndexInfo.
///
/// # Safety
/// `indexes` must be open.
unsafe fn open_indexes(
    indexes: pg_sys::CatalogIndexState,
) -> impl Iterator<Item = (pg_sys::Relation, *mut pg_sys::IndexInfo)> {
    (0..unsafe { (*indexes).ri_NumIndices } as usize).map(move |i| unsafe {
        (
            *(*indexes).ri_IndexRelationDescs.add(i),
            *(*indexes).ri_IndexRelationInfo.add(i),
        )
    })
}

/// Runs `work` with the lease table and the caller's role. An ERROR's abort closes the table
/// and its indexes.
fn with_lease_table<R>(
    fcinfo: pg_sys::FunctionCallInfo,
    work: impl FnOnce(&LeaseTable, pg_sys::Oid) -> R,
) -> R {
    let shape = SHAPE.get().unwrap_or_else(|| {
        let oid = extension::relation(fcinfo, LEASE_TABLE);
        let with_lock_delay = unsafe { pg_sys::get_attnum(oid, c"lock_delay".as_ptr()) } > 0;
        let shape = Shape {
            oid,
            columns: Columns::of(oid, with_lock_delay),
        };
        SHAPE.set(Some(shape));
        shape
    });
    unsafe {
        let heap = pg_sys::relation_open(shape.oid, pg_sys::RowExclusiveLock as _);
        // Opening the indexes asked the relation cache for the table's index list, which
        // names the primary key's index as it is now (REINDEX CONCURRENTLY gives it a new OID).
        let indexes = pg_sys::CatalogOpenIndexes(heap);
        let key_index = open_indexes(indexes)
            .map(|(index, _)| index)
            .find(|&index| (*index).rd_id == (*heap).rd_pkindex)
            .unwrap_or(std::ptr::null_mut());
        let lease = LeaseTable {
            heap,
            indexes,
            key_index,
            columns: shape.columns,
        };
        let result = work(&lease, unguarded::current_role());
        pg_sys::CatalogCloseIndexes(indexes);
        pg_sys::relation_close(heap, pg_sys::NoLock as _);
        result
    }
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

/// The lease's state before an acquire, seen by one look.
enum Seen {
    /// Taken (new token) or extended (same token): the token.
    Granted(i64),
    /// Held by another owner until this many microseconds from now.
    Held { expires_in_us: i64 },
}

/// An acquire as its SQL function was called, its arguments checked.
struct Acquire<'a> {
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: crate::locking::Keyed,
    owner: &'a str,
    ttl: Interval,
    /// Whether the acquire waits (then it needs to know until when a lease is held).
    waiting: bool,
}

/// One attempt: the lease if it is free, expired, or held by the acquire's owner (and the
/// caller's role, `role`).
fn attempt(lease: &LeaseTable, acquire: &Acquire, role: pg_sys::Oid) -> Seen {
    let Acquire {
        fcinfo,
        function,
        ref keyed,
        owner,
        ttl,
        waiting,
    } = *acquire;
    let columns = &lease.columns;
    let (ttl, delay) = (ttl.into_datum(), lock_delay().into_datum());
    // The columns a new holder writes, the key's own aside.
    let new_holder = |token: i64| {
        let (mut changes, _) = renewal(columns, ttl, delay);
        // Acquired when renewed: the renewal's own reading of the clock.
        let acquired_at = changes[0].1;
        changes.extend([
            (columns.owner, owner.into_datum()),
            (columns.holder, role.into_datum()),
            (columns.token, token.into_datum()),
            (columns.key, keyed.label.as_deref().into_datum()),
            (columns.acquired_at, acquired_at),
        ]);
        changes
    };
    loop {
        let now = unguarded::now();
        let this_owners =
            |row: &LeaseRow| row.owner.as_deref() == Some(owner) && row.held_for(role);
        let granted = |row: &LeaseRow| {
            // Still held by this owner: the same token, the TTL extended.
            if this_owners(row) && row.expires_at.is_some_and(|at| at > now) {
                return Some((renewal(columns, ttl, delay).0, row.token));
            }
            // Free, expired, or this owner's after expiry: a new grant. Its token is drawn
            // after the look, which saw the last holder's write committed, so it is above every
            // earlier holder's; a write that then finds the row busy leaves it unused, as a
            // rolled-back grant does.
            let takeable = row.owner.is_none()
                || this_owners(row)
                || row.available_at.is_some_and(|at| at <= now);
            takeable.then(|| {
                let token = tokens::next_token(fcinfo);
                (new_holder(token), token)
            })
        };
        match write_found(lease, function, keyed.key, granted) {
            Found::Written(token) => return Seen::Granted(token),
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
        // by another open transaction holds the key's first-lease lock until it ends: busy.
        if !lock_first_lease(keyed.key) {
            return Seen::Held { expires_in_us: 0 };
        }
        // With that lock, nobody else writes the key's first lease; one committed after the
        // look's snapshot is looked at again with a newer one, or under one snapshot
        // throughout is 40001 (where INSERT ... ON CONFLICT DO NOTHING would raise it too).
        if written_after_look(lease, keyed.key) {
            if transaction_snapshot() {
                FencedError::LeaseChangedAfterSnapshot {
                    function,
                    key: keyed.key,
                }
                .raise();
            }
            continue;
        }
        sweep_now_and_then(lease);
        // Tokens only rise: one drawn now is above every earlier holder's, swept rows' too.
        let token = tokens::next_token(fcinfo);
        let mut row = new_holder(token);
        row.extend([
            (columns.ns, keyed.key.ns.into_datum()),
            (columns.id, keyed.key.id.into_datum()),
        ]);
        insert_row(lease, &row);
        return Seen::Granted(token);
    }
}

/// A column's new value (None: NULL), by attribute number (from 1).
type Change = (i16, Option<pg_sys::Datum>);

/// The columns a renewal writes: renewed now, expiring `ttl` after it (also returned), with
/// the session's lock-delay. A new holder's row writes them too.
fn renewal(
    columns: &Columns,
    ttl: Option<pg_sys::Datum>,
    delay: Option<pg_sys::Datum>,
) -> (Vec<Change>, pg_sys::TimestampTz) {
    let now = unguarded::now();
    let expires_at = plus_interval(now, ttl.expect("a TTL"));
    let mut changes = vec![
        (columns.renewed_at, now.into_datum()),
        (columns.expires_at, expires_at.into_datum()),
    ];
    changes.extend(columns.lock_delay.map(|column| (column, delay)));
    (changes, expires_at)
}

/// `at` plus `interval`, with PostgreSQL's own `timestamptz + interval` (months and days on
/// the session's calendar; 22008 past the timestamp range).
fn plus_interval(at: pg_sys::TimestampTz, interval: pg_sys::Datum) -> pg_sys::TimestampTz {
    let sum = unsafe {
        pgrx::direct_function_call::<i64>(
            pg_sys::timestamptz_pl_interval,
            &[Some(pg_sys::Datum::from(at)), Some(interval)],
        )
    };
    sum.expect("timestamptz + interval is not NULL")
}

/// Inserts the row of a first lease, `changes` its columns (every other one NULL).
fn insert_row(lease: &LeaseTable, changes: &[Change]) {
    refuse_unmaintainable(lease);
    unsafe {
        let descriptor = (*lease.heap).rd_att;
        let width = (*descriptor).natts as usize;
        let (mut values, mut nulls) = (vec![pg_sys::Datum::from(0); width], vec![true; width]);
        for &(column, value) in changes {
            let index = column as usize - 1;
            values[index] = value.unwrap_or(pg_sys::Datum::from(0));
            nulls[index] = value.is_none();
        }
        let row = pg_sys::heap_form_tuple(descriptor, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::simple_heap_insert(lease.heap, row);
        insert_index_entries(lease, row, IndexEntries::All);
    }
}

/// What `update_row` found at the version it was given.
enum RowWrite {
    Written,
    /// Another open transaction has locked or is changing the row.
    Busy,
    /// The row was changed or deleted by a transaction that committed after the look's
    /// snapshot.
    Changed,
}

/// Writes `changes` into `row`, the version its look saw, and only that version, without
/// waiting: a newer version (a takeover committed meanwhile) is not followed, and nothing is
/// locked unless written.
fn update_row(lease: &LeaseTable, row: &LeaseRow, changes: &[Change]) -> RowWrite {
    refuse_unmaintainable(lease);
    unsafe {
        let mut columns: Vec<i32> = changes.iter().map(|&(column, _)| column.into()).collect();
        let mut values: Vec<pg_sys::Datum> = (changes.iter())
            .map(|&(_, value)| value.unwrap_or(pg_sys::Datum::from(0)))
            .collect();
        let mut nulls: Vec<bool> = changes.iter().map(|(_, value)| value.is_none()).collect();
        let new = pg_sys::heap_modify_tuple_by_cols(
            row.tuple,
            (*lease.heap).rd_att,
            changes.len() as _,
            columns.as_mut_ptr(),
            values.as_mut_ptr(),
            nulls.as_mut_ptr(),
        );
        let mut at = row.ctid;
        match compat::heap_update_no_wait(lease.heap, &mut at, new) {
            (TM_Result::TM_Ok, entries) => {
                insert_index_entries(lease, new, entries);
                RowWrite::Written
            }
            (TM_Result::TM_BeingModified | TM_Result::TM_WouldBlock, _) => RowWrite::Busy,
            _ => RowWrite::Changed,
        }
    }
}

/// Adds `tuple`, just written to the heap, to the table's indexes that `entries` names, as
/// PostgreSQL adds a catalog row to its catalog's indexes (CatalogIndexInsert): a unique index
/// checks uniqueness.
///
/// # Safety
/// `tuple` must be a row version of the lease table, written by this transaction.
unsafe fn insert_index_entries(
    lease: &LeaseTable,
    tuple: pg_sys::HeapTuple,
    entries: IndexEntries,
) {
    if entries == IndexEntries::None {
        return;
    }
    unsafe {
        let slot = pg_sys::MakeSingleTupleTableSlot(
            (*lease.heap).rd_att,
            &raw const pg_sys::TTSOpsHeapTuple,
        );
        pg_sys::ExecStoreHeapTuple(tuple, slot, false);
        for (index, info) in open_indexes(lease.indexes) {
            if !(*info).ii_ReadyForInserts
                || (entries == IndexEntries::Summarizing && !compat::summarizing(index))
            {
                continue;
            }
            let mut values = [pg_sys::Datum::from(0); pg_sys::INDEX_MAX_KEYS as usize];
            let mut nulls = [false; pg_sys::INDEX_MAX_KEYS as usize];
            pg_sys::FormIndexDatum(
                info,
                slot,
                std::ptr::null_mut(),
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
            let check = match (*(*index).rd_index).indisunique {
                true => pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES,
                false => pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO,
            };
            pg_sys::index_insert(
                index,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
                &raw mut (*tuple).t_self,
                lease.heap,
                check,
                false,
                info,
            );
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
    }
}

/// The rows are written as PostgreSQL writes its catalogs (the heap, then each index; HOT
/// where it can): no statement to plan and start per call. That way fires no trigger and
/// evaluates no index expression or predicate, so a table that has any is refused (55000)
/// rather than written behind its back.
fn refuse_unmaintainable(lease: &LeaseTable) {
    unsafe {
        if !(*lease.heap).trigdesc.is_null() {
            FencedError::LeaseTableAltered {
                what: "a trigger".into(),
            }
            .raise();
        }
        for (index, info) in open_indexes(lease.indexes) {
            if !(*info).ii_Expressions.is_null()
                || !(*info).ii_Predicate.is_null()
                || !(*info).ii_ExclusionOps.is_null()
                || !(*(*index).rd_index).indimmediate
            {
                let name = std::ffi::CStr::from_ptr((*(*index).rd_rel).relname.data.as_ptr());
                FencedError::LeaseTableAltered {
                    what: format!("index \"{}\"", name.to_string_lossy()),
                }
                .raise();
            }
        }
    }
}

/// Where the lease table's columns are (attribute numbers, from 1): read by name, since the
/// upgrade adds lock_delay at the end and a dropped column keeps its number.
#[derive(Clone, Copy)]
struct Columns {
    ns: i16,
    id: i16,
    key: i16,
    owner: i16,
    holder: i16,
    token: i16,
    acquired_at: i16,
    renewed_at: i16,
    expires_at: i16,
    lock_delay: Option<i16>,
}

impl Columns {
    fn of(table: pg_sys::Oid, with_lock_delay: bool) -> Columns {
        let number = |name: &std::ffi::CStr| unsafe { pg_sys::get_attnum(table, name.as_ptr()) };
        Columns {
            ns: number(c"ns"),
            id: number(c"id"),
            key: number(c"key"),
            owner: number(c"owner"),
            holder: number(c"holder"),
            token: number(c"token"),
            acquired_at: number(c"acquired_at"),
            renewed_at: number(c"renewed_at"),
            expires_at: number(c"expires_at"),
            lock_delay: with_lock_delay.then(|| number(c"lock_delay")),
        }
    }
}

/// A lease's row, as a statement run now would see it.
struct LeaseRow {
    ctid: pg_sys::ItemPointerData,
    /// A copy of the row version, for `update_row`.
    tuple: pg_sys::HeapTuple,
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
    /// The lease in `tuple`, a row of the lease table whose buffer is pinned (an interval is
    /// passed by reference).
    ///
    /// # Safety
    /// `tuple` must be valid.
    unsafe fn read(lease: &LeaseTable, tuple: pg_sys::HeapTuple) -> LeaseRow {
        let columns = &lease.columns;
        unsafe {
            let descriptor = (*lease.heap).rd_att;
            let width = (*descriptor).natts as usize;
            let (mut values, mut nulls) = (vec![pg_sys::Datum::from(0); width], vec![false; width]);
            pg_sys::heap_deform_tuple(tuple, descriptor, values.as_mut_ptr(), nulls.as_mut_ptr());
            let column = |number: i16| {
                let index = number as usize - 1;
                (!nulls[index]).then_some(values[index])
            };
            let expires_at = column(columns.expires_at).map(|at| at.value() as i64);
            let available_at = match columns.lock_delay.and_then(column) {
                Some(delay) => expires_at.map(|at| plus_interval(at, delay)),
                None => expires_at,
            };
            LeaseRow {
                ctid: (*tuple).t_self,
                tuple: pg_sys::heap_copytuple(tuple),
                owner: column(columns.owner).and_then(|owner| String::from_datum(owner, false)),
                holder: column(columns.holder).map_or(pg_sys::InvalidOid, |holder| {
                    pg_sys::Oid::from(holder.value() as u32)
                }),
                token: column(columns.token).map_or(0, |token| token.value() as i64),
                expires_at,
                available_at,
            }
        }
    }

    /// Whether `role` may act for the lease's holder: it is that role, or has its privileges
    /// (as `pg_has_role(role, holder, 'USAGE')`).
    fn held_for(&self, role: pg_sys::Oid) -> bool {
        self.holder != pg_sys::InvalidOid && unsafe { pg_sys::has_privs_of_role(role, self.holder) }
    }
}

/// `work` with what a statement run now would see: a new snapshot under READ COMMITTED (the
/// transaction's under REPEATABLE READ and SERIALIZABLE), after a command-counter increment,
/// so this transaction's earlier lease writes are seen too (as SPI does before every
/// statement).
fn as_a_statement_sees<R>(work: impl FnOnce(pg_sys::Snapshot) -> R) -> R {
    unsafe {
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        pg_sys::CommandCounterIncrement();
        pg_sys::UpdateActiveSnapshotCommandId();
        let result = work(pg_sys::GetActiveSnapshot());
        pg_sys::PopActiveSnapshot();
        result
    }
}

/// The row of the lease on `key`, read through the table's primary key, as a statement run
/// now would see it.
fn find(lease: &LeaseTable, key: LockKey) -> Option<LeaseRow> {
    as_a_statement_sees(|snapshot| unsafe {
        scan_key(lease, key, snapshot, |tuple| LeaseRow::read(lease, tuple))
    })
}

/// Whether the key has a row that a look, which found none, did not see: committed after its
/// snapshot, or being written by another open transaction (a dirty snapshot's view, as the
/// unique index's own check has it).
fn written_after_look(lease: &LeaseTable, key: LockKey) -> bool {
    unsafe {
        let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
        dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
        scan_key(lease, key, &mut dirty, |_| ()).is_some()
    }
}

/// `read` of the row of the lease on `key` that `snapshot` sees, if any, found through the
/// primary key's open index (without one, a scan of the table); its buffer is pinned while
/// `read` runs.
///
/// # Safety
/// `snapshot` must be valid.
unsafe fn scan_key<R>(
    lease: &LeaseTable,
    key: LockKey,
    snapshot: pg_sys::Snapshot,
    read: impl FnOnce(pg_sys::HeapTuple) -> R,
) -> Option<R> {
    unsafe {
        let mut keys: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
        for (scan_key, (column, value)) in keys
            .iter_mut()
            .zip([(lease.columns.ns, key.ns), (lease.columns.id, key.id)])
        {
            pg_sys::ScanKeyInit(
                scan_key,
                column,
                pg_sys::BTEqualStrategyNumber as _,
                pg_sys::Oid::from(pg_sys::F_INT4EQ),
                pg_sys::Datum::from(value),
            );
        }
        let (heap, index, count) = (lease.heap, lease.key_index, keys.len() as _);
        if index.is_null() {
            let scan = pg_sys::systable_beginscan(
                heap,
                pg_sys::InvalidOid,
                false,
                snapshot,
                count,
                keys.as_mut_ptr(),
            );
            let tuple = pg_sys::systable_getnext(scan);
            let result = (!tuple.is_null()).then(|| read(tuple));
            pg_sys::systable_endscan(scan);
            return result;
        }
        let scan =
            pg_sys::systable_beginscan_ordered(heap, index, snapshot, count, keys.as_mut_ptr());
        let tuple =
            pg_sys::systable_getnext_ordered(scan, pg_sys::ScanDirection::ForwardScanDirection);
        let result = (!tuple.is_null()).then(|| read(tuple));
        pg_sys::systable_endscan_ordered(scan);
        result
    }
}

/// Writes what `change` gives to the row of the lease on `key` held with `token` by `role`
/// (or a role it is a member of), as `write_found` does: what `change` returned with its
/// changes, or None when no lease is held with that token. Never waits (55P03: the caller must
/// hear that it could not write).
fn write_held<T>(
    lease: &LeaseTable,
    function: &'static str,
    (key, token, role): (LockKey, i64, pg_sys::Oid),
    mut change: impl FnMut() -> (Vec<Change>, T),
) -> Option<T> {
    let held = |row: &LeaseRow| row.token == token && row.owner.is_some() && row.held_for(role);
    match write_found(lease, function, key, |row| held(row).then(&mut change)) {
        Found::Written(result) => Some(result),
        Found::Busy => FencedError::LeaseRowBusy { function, key }.raise(),
        Found::Absent | Found::Refused(_) => None,
    }
}

/// What `write_found` found and did.
enum Found<T> {
    /// The key has no row.
    Absent,
    /// A row `change` left as it was.
    Refused(LeaseRow),
    /// A row `change` would write, which another open transaction has locked or is changing.
    Busy,
    /// A row written: what `change` returned with its changes.
    Written(T),
}

/// Finds the row of the lease on `key` and writes what `change` makes of it as seen
/// (`update_row`: that version only, without waiting), so that a caller that only looks never
/// stands in the holder's way. A row changed after the look's snapshot is looked at again with
/// a newer one, unless the transaction reads one snapshot throughout: then 40001 (a look again
/// would see the same row).
fn write_found<T>(
    lease: &LeaseTable,
    function: &'static str,
    key: LockKey,
    mut change: impl FnMut(&LeaseRow) -> Option<(Vec<Change>, T)>,
) -> Found<T> {
    loop {
        let Some(row) = find(lease, key) else {
            return Found::Absent;
        };
        let Some((changes, result)) = change(&row) else {
            return Found::Refused(row);
        };
        match update_row(lease, &row, &changes) {
            RowWrite::Written => return Found::Written(result),
            RowWrite::Busy => return Found::Busy,
            RowWrite::Changed if transaction_snapshot() => {
                FencedError::LeaseChangedAfterSnapshot { function, key }.raise()
            }
            RowWrite::Changed => continue,
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

/// Deletes the released and long-expired (RETENTION_US) leases on the next SWEEP_PAGES pages
/// of the table, at this backend's first first lease and every SWEEP_EVERY-th after it,
/// skipping rows that other transactions have locked or changed. First leases
/// sweep more than they add, so dead rows cannot pile up, and no background worker is needed.
fn sweep_now_and_then(lease: &LeaseTable) {
    let (next_page, since_sweep) = NEXT_SWEEP.get();
    if since_sweep % SWEEP_EVERY != 0 {
        NEXT_SWEEP.set((next_page, since_sweep + 1));
        return;
    }
    let heap = lease.heap;
    let pages =
        unsafe { pg_sys::RelationGetNumberOfBlocksInFork(heap, pg_sys::ForkNumber::MAIN_FORKNUM) };
    if pages == 0 {
        return;
    }
    let start = match pages > SWEEP_PAGES {
        true => next_page.unwrap_or(unsafe { pg_sys::MyProcPid } as u32) % pages,
        false => 0,
    };
    NEXT_SWEEP.set((Some(start + SWEEP_PAGES), 1));
    let retired_before = unguarded::now() - RETENTION_US;
    let retired = |row: &LeaseRow| {
        row.owner.is_none() || row.available_at.is_some_and(|at| at < retired_before)
    };
    let rows: Vec<pg_sys::ItemPointerData> = as_a_statement_sees(|snapshot| unsafe {
        use pg_sys::ScanOptions::{SO_ALLOW_PAGEMODE, SO_TYPE_SEQSCAN};
        let flags = SO_TYPE_SEQSCAN | SO_ALLOW_PAGEMODE;
        let scan = pg_sys::heap_beginscan(
            heap,
            snapshot,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            flags,
        );
        pg_sys::heap_setscanlimits(scan, start, SWEEP_PAGES.min(pages - start));
        let mut rows = Vec::new();
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let row = LeaseRow::read(lease, tuple);
            if retired(&row) {
                rows.push(row.ctid);
            }
        }
        pg_sys::heap_endscan(scan);
        rows
    });
    // Each as seen, without waiting: a row another transaction locked or changed is skipped.
    for mut row in rows {
        unsafe {
            let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
            let cid = pg_sys::GetCurrentCommandId(true);
            let snapshot = std::ptr::null_mut();
            pg_sys::heap_delete(heap, &mut row, cid, snapshot, false, &mut failure, false);
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
    let now = unguarded::now;
    let deadline =
        wait.map(|wait| now().saturating_add(wait.as_micros().clamp(0, i64::MAX as i128) as i64));
    let channel = wakeup_channel(keyed.key);
    let call = Acquire {
        fcinfo,
        function,
        keyed,
        owner,
        ttl,
        waiting: deadline.is_some(),
    };
    loop {
        // Prepared before looking, so a release between the look and the sleep still wakes
        // this backend.
        if let (Some(channel), Some(_)) = (channel, deadline) {
            unsafe { pg_sys::ConditionVariablePrepareToSleep(channel) };
        }
        let seen = with_lease_table(fcinfo, |lease, role| attempt(lease, &call, role));
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
        with_lease_table(fcinfo, |lease, role| {
            let (ttl, delay) = (ttl.into_datum(), lock_delay().into_datum());
            let held = (keyed.key, token, role);
            let expires_at = write_held(lease, function, held, || {
                renewal(&lease.columns, ttl, delay)
            })?;
            unsafe { TimestampWithTimeZone::from_datum(expires_at.into(), false) }
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
        let released = with_lease_table(fcinfo, |lease, role| {
            let columns = &lease.columns;
            let released = [columns.owner, columns.holder, columns.renewed_at, columns.expires_at];
            write_held(lease, function, (keyed.key, token, role), || {
                (released.map(|column| (column, None)).to_vec(), ())
            })
        })
        .is_some();
        if released {
            if let Some(channel) = wakeup_channel(keyed.key) {
                RELEASED_CHANNELS.with_borrow_mut(|channels| channels.push(channel));
            }
        }
        released
    },
}
