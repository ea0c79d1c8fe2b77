//! The lease table's storage: `fenced_lease_state` read and written without SQL, straight to
//! its heap and indexes, as PostgreSQL writes its catalogs (no statement to plan and start per
//! call). What this layer promises the lease functions above it:
//!
//! - **Shape.** The table's OID, its column numbers and whether it has anything the writes
//!   below refuse are kept between calls, and read again after the table is opened and locked
//!   whenever the relation cache says it changed (the upgrade adds lock_delay under running
//!   sessions; DROP and CREATE EXTENSION make a new table; another session adds a trigger).
//! - **Reads.** A look sees what a statement run now would see (`find`), through the primary
//!   key. No read of a row can fail: a timestamp sum past the end of time saturates to
//!   infinity, so one row (the owner's own UPDATE, a row of an earlier version) cannot fail
//!   another key's call.
//! - **Writes.** Only the version a look saw is written, without waiting (`update_row`:
//!   busy, or changed after the look), and every index gets its entry. A first lease's row is
//!   inserted as INSERT ... ON CONFLICT DO NOTHING inserts one (`insert_first_lease`): a row
//!   of the key that the look did not see is reported, never a second row or 23505. What
//!   these writes cannot honour is refused with 55000 before anything is written
//!   (`refuse_unmaintainable`): triggers; indexes with expressions, predicates, exclusion or
//!   deferred checks; CHECK constraints; stored generated columns; columns the lease functions
//!   do not know that have a default or NOT NULL; NOT NULL on the key's text.
//! - **The sweep.** A release deletes its row; long-expired rows (and released ones, owner
//!   NULL, that releases before 0.4.0 left) are deleted as a transaction that took a first
//!   lease commits (never in one that is prepared or serializable), so no open transaction
//!   holds them and no other session's call waits on the outcome; the sweep reads without an
//!   MVCC snapshot (no SSI predicate lock) and deletes only committed rows no transaction is
//!   changing.

use crate::compat::{self, IndexEntries};
use crate::errors::FencedError;
use crate::extension;
use crate::types::LockKey;
use crate::unguarded;
use pgrx::pg_sys::{self, TM_Result};
use pgrx::prelude::*;

const LEASE_TABLE: &std::ffi::CStr = c"fenced_lease_state";

/// Leases available to others for longer than this (an hour, in microseconds), and rows of
/// releases before 0.4.0 (owner NULL), are deleted by the sweep, so that the table does not
/// grow without bound.
const RETENTION_US: i64 = 3_600_000_000;

/// Every SWEEP_EVERY-th first lease of a key in a backend sweeps SWEEP_PAGES table pages for
/// such rows, in one scan rather than one per first lease. A sweep that finds none (pages of
/// live leases) doubles the backend's interval, up to SWEEP_EVERY_MOST, and one that deletes
/// some sets it back: a large table of live leases is not read over and over for nothing.
/// Even the longest interval reads more rows than its first leases add (a page holds at least
/// a dozen lease rows of the longest owner and key: 384 rows per 256 first leases), so the
/// sweep overtakes the table's growth and comes round to every retired row.
const SWEEP_EVERY: u32 = 16;
const SWEEP_EVERY_MOST: u32 = 16 * SWEEP_EVERY;
const SWEEP_PAGES: u32 = 2 * SWEEP_EVERY;

/// PostgreSQL's timestamp range in microseconds since 2000-01-01 (MIN_TIMESTAMP and
/// END_TIMESTAMP in datatype/timestamp.h: 4714-11-24 BC and 294277-01-01, exclusive); its
/// infinities are the i64 extremes.
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;

/// What a backend keeps of the lease table between calls: its OID, where its columns are, and
/// whether `refuse_unmaintainable` found nothing to refuse. Whatever could change either (a
/// column, a trigger, an index, a constraint) invalidates the table's relation cache entry,
/// which forgets it all.
#[derive(Clone, Copy)]
struct Shape {
    oid: pg_sys::Oid,
    columns: Columns,
    writable: bool,
}

thread_local! {
    static SHAPE: std::cell::Cell<Option<Shape>> = const { std::cell::Cell::new(None) };
}

pub fn register_callbacks() {
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), 0.into());
        pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut());
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
pub struct LeaseTable {
    heap: pg_sys::Relation,
    /// Every index of the table, open for `insert_row` and `update_row`.
    indexes: pg_sys::CatalogIndexState,
    /// The primary key's index, among `indexes`; null without one (then a table scan finds a
    /// key's row).
    key_index: pg_sys::Relation,
    pub columns: Columns,
}

impl LeaseTable {
    /// The table `oid`, opened and locked, its shape read after the lock (which processed
    /// any invalidation of it); None when it no longer exists, or (`wait` false) when its lock
    /// is not free at once.
    fn open(oid: pg_sys::Oid, wait: bool) -> Option<LeaseTable> {
        unsafe {
            let lock = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
            if !wait && !pg_sys::ConditionalLockRelationOid(oid, lock) {
                return None;
            }
            let heap = pg_sys::try_relation_open(oid, if wait { lock } else { 0 });
            if heap.is_null() {
                SHAPE.set(None);
                return None;
            }
            let columns = match SHAPE.get() {
                Some(shape) if shape.oid == oid => shape.columns,
                _ => {
                    let columns = Columns::of(oid);
                    SHAPE.set(Some(Shape {
                        oid,
                        columns,
                        writable: false,
                    }));
                    columns
                }
            };
            // Opening the indexes asked the relation cache for the table's index list, which
            // names the primary key's index as it is now (REINDEX CONCURRENTLY gives it a new
            // OID).
            let indexes = pg_sys::CatalogOpenIndexes(heap);
            let key_index = open_indexes(indexes)
                .map(|(index, _)| index)
                .find(|&index| (*index).rd_id == (*heap).rd_pkindex)
                .unwrap_or(std::ptr::null_mut());
            Some(LeaseTable {
                heap,
                indexes,
                key_index,
                columns,
            })
        }
    }

    fn close(self) {
        unsafe {
            pg_sys::CatalogCloseIndexes(self.indexes);
            pg_sys::relation_close(self.heap, pg_sys::NoLock as _);
        }
    }
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
pub fn with_lease_table<R>(
    fcinfo: pg_sys::FunctionCallInfo,
    work: impl FnOnce(&LeaseTable, pg_sys::Oid) -> R,
) -> R {
    let known = SHAPE.get().map(|shape| shape.oid);
    let lease = known
        .and_then(|oid| LeaseTable::open(oid, true))
        // Never opened, or dropped since (DROP and CREATE EXTENSION): found by name.
        .or_else(|| LeaseTable::open(extension::relation(fcinfo, LEASE_TABLE), true))
        .expect("the lease table found by name exists");
    let result = work(&lease, unguarded::current_role());
    lease.close();
    result
}

/// A column's new value (None: NULL), by attribute number (from 1).
pub type Change = (i16, Option<pg_sys::Datum>);

/// Inserts the row of the first lease of `key`'s `slot`, `changes` its columns (every other
/// one NULL), as INSERT ... ON CONFLICT DO NOTHING inserts one: speculatively, then its index
/// entries, the primary key's reporting a row of the key that the look did not see (committed
/// after its snapshot, or being written by another open transaction) instead of raising 23505
/// or waiting for it. Then the insertion is taken back at once (no other transaction sees it
/// or waits for it) and the row the key has instead is returned. A table without a primary key
/// is looked at with a dirty snapshot first.
pub fn insert_first_lease(
    lease: &LeaseTable,
    (key, slot): (LockKey, u16),
    changes: &[Change],
) -> Result<(), Unseen> {
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
        if lease.key_index.is_null() {
            match unseen_row(lease, key, slot) {
                Unseen::Nothing => {}
                unseen => return Err(unseen),
            }
            pg_sys::simple_heap_insert(lease.heap, row);
            insert_index_entries(lease, row, IndexEntries::All, KeyCheck::Raise);
            return Ok(());
        }
        // As heapam_tuple_insert_speculative: the token stands where the row's own position
        // would, so that a unique check that meets the row waits for the token, not for this
        // transaction.
        let xid = pg_sys::GetCurrentTransactionId();
        let token = pg_sys::SpeculativeInsertionLockAcquire(xid);
        let position = pg_sys::SpecTokenOffsetNumber as pg_sys::OffsetNumber;
        pgrx::itemptr::item_pointer_set_all(&mut (*(*row).t_data).t_ctid, token, position);
        let command = pg_sys::GetCurrentCommandId(true);
        let speculative = pg_sys::HEAP_INSERT_SPECULATIVE as std::ffi::c_int;
        pg_sys::heap_insert(lease.heap, row, command, speculative, std::ptr::null_mut());
        let unique = insert_index_entries(lease, row, IndexEntries::All, KeyCheck::Report);
        match unique {
            true => pg_sys::heap_finish_speculative(lease.heap, &raw mut (*row).t_self),
            false => pg_sys::heap_abort_speculative(lease.heap, &raw mut (*row).t_self),
        }
        pg_sys::SpeculativeInsertionLockRelease(xid);
        match unique {
            true => Ok(()),
            false => Err(unseen_row(lease, key, slot)),
        }
    }
}

/// What a write makes of the version a look saw: its columns changed, or the row deleted (a
/// release: the row a key no longer needs goes at once, with no index entry to add, instead of
/// waiting as a released row for the sweep).
pub enum Rewrite {
    Set(Vec<Change>),
    Delete,
}

/// What `update_row` found at the version it was given.
pub enum RowWrite {
    Written,
    /// Another open transaction has locked or is changing the row.
    Busy,
    /// The row was changed or deleted by a transaction that committed after the look's
    /// snapshot.
    Changed,
}

/// Writes `rewrite` to `row`, the version its look saw, and only that version, without
/// waiting: a newer version (a takeover committed meanwhile) is not followed, and nothing is
/// locked unless written.
pub fn update_row(lease: &LeaseTable, row: &LeaseRow, rewrite: &Rewrite) -> RowWrite {
    refuse_unmaintainable(lease);
    let changes = match rewrite {
        Rewrite::Set(changes) => changes,
        Rewrite::Delete => {
            let mut at = row.ctid;
            return match unsafe { delete_version(lease.heap, &mut at) } {
                TM_Result::TM_Ok => RowWrite::Written,
                TM_Result::TM_BeingModified | TM_Result::TM_WouldBlock => RowWrite::Busy,
                _ => RowWrite::Changed,
            };
        }
    };
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
                insert_index_entries(lease, new, entries, KeyCheck::Raise);
                RowWrite::Written
            }
            (TM_Result::TM_BeingModified | TM_Result::TM_WouldBlock, _) => RowWrite::Busy,
            _ => RowWrite::Changed,
        }
    }
}

/// Deletes the row version at `at`, and only that version, without waiting: what heap_delete
/// found there (TM_Ok when deleted).
///
/// # Safety
/// `heap` must be the open lease table, locked as for a write, and `at` a version of its rows.
unsafe fn delete_version(
    heap: pg_sys::Relation,
    at: &mut pg_sys::ItemPointerData,
) -> TM_Result::Type {
    unsafe {
        let cid = pg_sys::GetCurrentCommandId(true);
        let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
        let crosscheck = std::ptr::null_mut();
        pg_sys::heap_delete(heap, at, cid, crosscheck, false, &mut failure, false)
    }
}

/// What the primary key's entry does when its key is already there.
#[derive(Clone, Copy, PartialEq)]
enum KeyCheck {
    /// 23505 (after waiting for a writer still at work), as a plain INSERT or UPDATE.
    Raise,
    /// Reported (false), the entry added anyway: a speculative insertion is taken back then.
    Report,
}

/// Adds `tuple`, just written to the heap, to the table's indexes that `entries` names, as
/// PostgreSQL adds a catalog row to its catalog's indexes (CatalogIndexInsert): a unique index
/// checks uniqueness, the primary key's as `key_check` says. False when the primary key's
/// reported its key already there.
///
/// # Safety
/// `tuple` must be a row version of the lease table, written by this transaction.
unsafe fn insert_index_entries(
    lease: &LeaseTable,
    tuple: pg_sys::HeapTuple,
    entries: IndexEntries,
    key_check: KeyCheck,
) -> bool {
    if entries == IndexEntries::None {
        return true;
    }
    let mut unique = true;
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
            let reports = index == lease.key_index && key_check == KeyCheck::Report;
            let check = match (*(*index).rd_index).indisunique {
                true if reports => pg_sys::IndexUniqueCheck::UNIQUE_CHECK_PARTIAL,
                true => pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES,
                false => pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO,
            };
            let inserted_unique = pg_sys::index_insert(
                index,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
                &raw mut (*tuple).t_self,
                lease.heap,
                check,
                false,
                info,
            );
            unique &= !reports || inserted_unique;
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
    }
    unique
}

/// The rows are written as PostgreSQL writes its catalogs (the heap, then each index; HOT
/// where it can): that way fires no trigger, evaluates no index expression, predicate, CHECK
/// constraint, default or generated column, and checks no NOT NULL. A table that has any the
/// writes would need is refused (55000) rather than written behind its back.
fn refuse_unmaintainable(lease: &LeaseTable) {
    let oid = unsafe { (*lease.heap).rd_id };
    let this_table = |shape: &Shape| shape.oid == oid;
    if SHAPE
        .get()
        .is_some_and(|shape| this_table(&shape) && shape.writable)
    {
        return;
    }
    let refuse = |what: String| FencedError::LeaseTableAltered { what }.raise();
    let name = |name: &pg_sys::NameData| {
        let name = unsafe { std::ffi::CStr::from_ptr(name.data.as_ptr()) };
        name.to_string_lossy().into_owned()
    };
    unsafe {
        if !(*lease.heap).trigdesc.is_null() {
            refuse("a trigger".into());
        }
        for (index, info) in open_indexes(lease.indexes) {
            if !(*info).ii_Expressions.is_null()
                || !(*info).ii_Predicate.is_null()
                || !(*info).ii_ExclusionOps.is_null()
                || !(*(*index).rd_index).indimmediate
            {
                refuse(format!("index \"{}\"", name(&(*(*index).rd_rel).relname)));
            }
        }
        let descriptor = (*lease.heap).rd_att;
        let constraints = (*descriptor).constr;
        if !constraints.is_null() && (*constraints).num_check > 0 {
            refuse("a CHECK constraint".into());
        }
        let columns = &lease.columns;
        for (number, attribute) in (1..).zip(compat::attributes(descriptor)) {
            if attribute.attisdropped {
                continue;
            }
            // The name is made into a string only for the refusal.
            let column = || name(&attribute.attname);
            if attribute.attgenerated != 0 {
                refuse(format!("the generated column \"{}\"", column()));
            }
            if !columns.known(number) && (attribute.attnotnull || attribute.atthasdef) {
                refuse(format!(
                    "the column \"{}\" with a default or NOT NULL",
                    column()
                ));
            }
            // The one column a write leaves NULL: the key's text, for a key given by numbers
            // (a release deletes its row).
            if number == columns.key && attribute.attnotnull {
                refuse(format!("NOT NULL on the column \"{}\"", column()));
            }
        }
    }
    // Kept only if no invalidation forgot the shape since the table was opened: the check
    // then read what the table is now.
    SHAPE.set(SHAPE.get().filter(this_table).map(|shape| Shape {
        writable: true,
        ..shape
    }));
}

/// Where the lease table's columns are (attribute numbers, from 1): read by name, since the
/// upgrade adds lock_delay at the end and a dropped column keeps its number.
#[derive(Clone, Copy)]
pub struct Columns {
    pub ns: i16,
    pub id: i16,
    pub key: i16,
    pub owner: i16,
    pub holder: i16,
    pub token: i16,
    pub acquired_at: i16,
    pub renewed_at: i16,
    pub expires_at: i16,
    /// None on a table of 0.2.0, before its upgrade.
    pub lock_delay: Option<i16>,
    /// A permit's slot (0: the key's lease itself); None on a table before 0.4.0's upgrade,
    /// whose rows are all slot 0.
    pub slot: Option<i16>,
}

impl Columns {
    /// The columns of `table`, locked (so that its catalog rows are current).
    fn of(table: pg_sys::Oid) -> Columns {
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
            lock_delay: Some(number(c"lock_delay")).filter(|&number| number > 0),
            slot: Some(number(c"slot")).filter(|&number| number > 0),
        }
    }

    fn known(&self, number: i16) -> bool {
        let always = [
            self.ns,
            self.id,
            self.key,
            self.owner,
            self.holder,
            self.token,
            self.acquired_at,
            self.renewed_at,
            self.expires_at,
        ];
        always.contains(&number) || self.lock_delay == Some(number) || self.slot == Some(number)
    }
}

/// A lease's row, as a statement run now would see it.
pub struct LeaseRow {
    ctid: pg_sys::ItemPointerData,
    /// A copy of the row version, for `update_row`.
    tuple: pg_sys::HeapTuple,
    /// The permit's slot; 0 for the key's lease itself.
    pub slot: u16,
    pub owner: Option<String>,
    /// The role that took it (InvalidOid for none).
    holder: pg_sys::Oid,
    pub token: i64,
    pub expires_at: Option<pg_sys::TimestampTz>,
    /// When another owner may take it, if it expires unreleased: its expiry plus its
    /// lock-delay (saturated: 'infinity' past the end of time).
    pub available_at: Option<pg_sys::TimestampTz>,
}

/// A lease row's columns, deformed into buffers that a scan reuses from row to row.
struct Deformed {
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

impl Deformed {
    fn new(lease: &LeaseTable) -> Deformed {
        let width = unsafe { (*(*lease.heap).rd_att).natts } as usize;
        Deformed {
            values: vec![pg_sys::Datum::from(0); width],
            nulls: vec![false; width],
        }
    }

    /// # Safety
    /// `tuple` must be a valid row of `lease`'s table whose buffer is pinned.
    unsafe fn deform(&mut self, lease: &LeaseTable, tuple: pg_sys::HeapTuple) -> &Deformed {
        unsafe {
            let descriptor = (*lease.heap).rd_att;
            let (values, nulls) = (self.values.as_mut_ptr(), self.nulls.as_mut_ptr());
            pg_sys::heap_deform_tuple(tuple, descriptor, values, nulls);
        }
        self
    }

    fn column(&self, number: i16) -> Option<pg_sys::Datum> {
        let index = number as usize - 1;
        (!self.nulls[index]).then_some(self.values[index])
    }

    fn expires_at(&self, columns: &Columns) -> Option<pg_sys::TimestampTz> {
        self.column(columns.expires_at).map(|at| at.value() as i64)
    }

    /// When another owner may take the lease: its expiry plus its lock-delay.
    fn available_at(&self, columns: &Columns) -> Option<pg_sys::TimestampTz> {
        let expires_at = self.expires_at(columns);
        match columns.lock_delay.and_then(|number| self.column(number)) {
            Some(delay) => expires_at.map(|at| saturating_plus(at, delay)),
            None => expires_at,
        }
    }
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
            let mut buffers = Deformed::new(lease);
            let row = buffers.deform(lease, tuple);
            LeaseRow {
                ctid: (*tuple).t_self,
                tuple: pg_sys::heap_copytuple(tuple),
                slot: (columns.slot.and_then(|number| row.column(number)))
                    .map_or(0, |slot| slot.value() as u16),
                owner: (row.column(columns.owner))
                    .and_then(|owner| String::from_datum(owner, false)),
                holder: row
                    .column(columns.holder)
                    .map_or(pg_sys::InvalidOid, |holder| {
                        pg_sys::Oid::from(holder.value() as u32)
                    }),
                token: row
                    .column(columns.token)
                    .map_or(0, |token| token.value() as i64),
                expires_at: row.expires_at(columns),
                available_at: row.available_at(columns),
            }
        }
    }

    /// Whether `role` may act for the lease's holder: it is that role, or has its privileges
    /// (as `pg_has_role(role, holder, 'USAGE')`).
    pub fn held_for(&self, role: pg_sys::Oid) -> bool {
        self.holder != pg_sys::InvalidOid && unsafe { pg_sys::has_privs_of_role(role, self.holder) }
    }
}

/// `at` plus `interval` (a Datum of an interval), as `timestamptz + interval` adds them
/// (months and days on the session's calendar), but never failing: a sum past either end of
/// the timestamp range is that end's infinity.
pub fn saturating_plus(at: pg_sys::TimestampTz, interval: pg_sys::Datum) -> pg_sys::TimestampTz {
    let within = |sum: i64| match sum {
        END_TIMESTAMP.. => i64::MAX,
        ..MIN_TIMESTAMP => i64::MIN,
        sum => sum,
    };
    let (months, days, micros) = unsafe {
        let interval = interval.cast_mut_ptr::<pg_sys::Interval>();
        ((*interval).month, (*interval).day, (*interval).time)
    };
    if at == i64::MAX || at == i64::MIN {
        return at;
    }
    if months == 0 && days == 0 {
        return within(at.saturating_add(micros));
    }
    // The calendar's arithmetic is PostgreSQL's own; only its range error (22008) is caught (it
    // leaves nothing to clean up), and read by the interval's sign.
    PgTryBuilder::new(|| unsafe {
        pgrx::direct_function_call::<i64>(
            pg_sys::timestamptz_pl_interval,
            &[Some(pg_sys::Datum::from(at)), Some(interval)],
        )
        .expect("timestamptz + interval is not NULL")
    })
    .catch_when(PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW, |_| {
        let forward = i128::from(months) * 30 * 86_400_000_000
            + i128::from(days) * 86_400_000_000
            + i128::from(micros);
        if forward >= 0 {
            i64::MAX
        } else {
            i64::MIN
        }
    })
    .execute()
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

/// Which row of a key: its lease (slot 0) or a permit's (`Slot`), or the one held with a token.
#[derive(Clone, Copy)]
pub enum Which {
    Slot(u16),
    Token(i64),
}

/// The row of `key` that `which` names, read through the table's primary key, as a statement
/// run now would see it.
pub fn find(lease: &LeaseTable, key: LockKey, which: Which) -> Option<LeaseRow> {
    let slot = match which {
        Which::Slot(slot) => Some(slot),
        Which::Token(_) => None,
    };
    as_a_statement_sees(|snapshot| unsafe {
        scan_key(lease, key, slot, snapshot, |tuple| {
            let row = LeaseRow::read(lease, tuple);
            match which {
                Which::Token(token) if row.token != token => None,
                _ => Some(row),
            }
        })
    })
}

/// Every row of `key` (its lease and its permits' leases), as `find` sees each.
pub fn rows_of(lease: &LeaseTable, key: LockKey) -> Vec<LeaseRow> {
    let mut rows = Vec::new();
    as_a_statement_sees(|snapshot| unsafe {
        scan_key(lease, key, None, snapshot, |tuple| {
            rows.push(LeaseRow::read(lease, tuple));
            None::<()>
        })
    });
    rows
}

/// A row of a key that a look, which found none, did not see.
pub enum Unseen {
    /// There is none.
    Nothing,
    /// Committed after the look's snapshot: a newer snapshot sees it.
    Committed,
    /// Being written by another open transaction (a first lease, or the owner's own INSERT):
    /// no snapshot sees it until that transaction ends.
    InProgress,
}

/// The key's row that a look, which found none, did not see: a dirty snapshot's view, as the
/// unique index's own check has it.
fn unseen_row(lease: &LeaseTable, key: LockKey, slot: u16) -> Unseen {
    unsafe {
        let mut dirty = dirty_snapshot();
        let dirty: pg_sys::Snapshot = &mut dirty;
        // The dirty snapshot reports the row's inserter while it runs.
        match scan_key(lease, key, Some(slot), dirty, |_| Some((*dirty).xmin)) {
            None => Unseen::Nothing,
            Some(pg_sys::InvalidTransactionId) => Unseen::Committed,
            Some(_) => Unseen::InProgress,
        }
    }
}

/// Whether `row`, as a REPEATABLE READ or SERIALIZABLE transaction's snapshot shows it, is
/// gone from the key: deleted (released, swept) or replaced (renewed, taken over) by a
/// transaction that committed after the snapshot. That transaction can never see the key as
/// it is now. A version another open transaction is writing still counts as the key's row.
pub fn superseded(lease: &LeaseTable, key: LockKey, row: &LeaseRow) -> bool {
    let same = |a: &pg_sys::ItemPointerData, b: &pg_sys::ItemPointerData| {
        (a.ip_blkid.bi_hi, a.ip_blkid.bi_lo, a.ip_posid)
            == (b.ip_blkid.bi_hi, b.ip_blkid.bi_lo, b.ip_posid)
    };
    unsafe {
        let mut dirty = dirty_snapshot();
        let found = scan_key(lease, key, Some(row.slot), &mut dirty, |tuple| {
            same(&(*tuple).t_self, &row.ctid).then_some(())
        });
        found.is_none()
    }
}

/// A dirty snapshot (what the unique index's own check uses): committed rows and rows other
/// transactions are writing, whose running inserter and deleter it reports in `xmin` and
/// `xmax` after each visibility test. Not an MVCC snapshot, so it takes no SSI predicate lock.
fn dirty_snapshot() -> pg_sys::SnapshotData {
    let mut dirty: pg_sys::SnapshotData = unsafe { std::mem::zeroed() };
    dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
    dirty
}

/// The first answer of `read` for the rows of `key` that `snapshot` sees (of its `slot` only,
/// when given), found through the primary key's open index (without one, a scan of the table);
/// each row's buffer is pinned while `read` runs.
///
/// # Safety
/// `snapshot` must be valid.
unsafe fn scan_key<R>(
    lease: &LeaseTable,
    key: LockKey,
    slot: Option<u16>,
    snapshot: pg_sys::Snapshot,
    mut read: impl FnMut(pg_sys::HeapTuple) -> Option<R>,
) -> Option<R> {
    let columns = &lease.columns;
    let mut equal = vec![(columns.ns, key.ns), (columns.id, key.id)];
    match (slot, columns.slot) {
        (Some(slot), Some(column)) => equal.push((column, slot.into())),
        // A table without slots (before the upgrade) has slot 0 only.
        (Some(1..), None) => return None,
        _ => {}
    }
    unsafe {
        let mut keys: Vec<pg_sys::ScanKeyData> = vec![std::mem::zeroed(); equal.len()];
        for (scan_key, &(column, value)) in keys.iter_mut().zip(&equal) {
            pg_sys::ScanKeyInit(
                scan_key,
                column,
                pg_sys::BTEqualStrategyNumber as _,
                pg_sys::Oid::from(pg_sys::F_INT4EQ),
                pg_sys::Datum::from(value),
            );
        }
        let (heap, index, count) = (lease.heap, lease.key_index, keys.len() as _);
        // The first row `read` answers for, of those `next` returns until a null one.
        let mut first = |next: &mut dyn FnMut() -> pg_sys::HeapTuple| loop {
            let tuple = next();
            if tuple.is_null() {
                return None;
            }
            if let Some(result) = read(tuple) {
                return Some(result);
            }
        };
        if index.is_null() {
            let scan = pg_sys::systable_beginscan(
                heap,
                pg_sys::InvalidOid,
                false,
                snapshot,
                count,
                keys.as_mut_ptr(),
            );
            let result = first(&mut || pg_sys::systable_getnext(scan));
            pg_sys::systable_endscan(scan);
            return result;
        }
        let scan =
            pg_sys::systable_beginscan_ordered(heap, index, snapshot, count, keys.as_mut_ptr());
        let forward = pg_sys::ScanDirection::ForwardScanDirection;
        let result = first(&mut || pg_sys::systable_getnext_ordered(scan, forward));
        pg_sys::systable_endscan_ordered(scan);
        result
    }
}

/// Where a backend is in its sweeps of the lease table.
#[derive(Clone, Copy)]
struct Sweeps {
    /// The table page the next sweep starts at (backends start at different pages).
    next_page: Option<u32>,
    /// First leases taken since the last sweep.
    first_leases: u32,
    /// First leases from one sweep to the next (SWEEP_EVERY to SWEEP_EVERY_MOST).
    every: u32,
}

thread_local! {
    static SWEEPS: std::cell::Cell<Sweeps> = const {
        std::cell::Cell::new(Sweeps { next_page: None, first_leases: 0, every: SWEEP_EVERY })
    };
    /// The lease table to sweep when this transaction commits.
    static SWEEP_AT_COMMIT: std::cell::Cell<Option<pg_sys::Oid>> =
        const { std::cell::Cell::new(None) };
}

/// Counts a first lease: this backend's first, and every `every`-th after it, sweeps the
/// table when its transaction commits. First leases sweep more than they add, so dead rows
/// cannot pile up, and no background worker is needed.
pub fn sweep_now_and_then(lease: &LeaseTable) {
    let sweeps = SWEEPS.get();
    if sweeps.first_leases.is_multiple_of(sweeps.every) {
        SWEEP_AT_COMMIT.set(Some(unsafe { (*lease.heap).rd_id }));
    }
    SWEEPS.set(Sweeps {
        first_leases: sweeps.first_leases + 1,
        ..sweeps
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut core::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    let ending = matches!(
        event,
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE | XACT_EVENT_ABORT
    );
    // A serializable transaction's deletes would take part in its read/write dependencies
    // (SSI): another serializable transaction that read a swept row could make this one's
    // COMMIT fail with 40001 over rows it never looked at.
    let serializable = unsafe { pg_sys::XactIsoLevel } == pg_sys::XACT_SERIALIZABLE as i32;
    match (ending.then(|| SWEEP_AT_COMMIT.take()).flatten(), event) {
        (Some(table), XACT_EVENT_PRE_COMMIT) if !serializable => sweep(table),
        // A prepared transaction would hold the deleted rows until COMMIT PREPARED, and a
        // serializable one would depend on them: neither sweeps (nor one that aborts), and the
        // backend's next first lease does instead.
        (Some(_), _) => SWEEPS.set(Sweeps {
            first_leases: 0,
            ..SWEEPS.get()
        }),
        (None, _) => {}
    }
}

/// Deletes the released (owner NULL) and long-expired (RETENTION_US) leases on the next
/// SWEEP_PAGES pages of `table`, as the transaction that counted the sweep commits: the
/// deleted rows are held by no open transaction, so no other session's call waits on them.
/// The rows are read with a dirty snapshot (no MVCC snapshot, so no SSI predicate lock on rows
/// the caller never looked at), and only committed rows that no other transaction is changing
/// are deleted, each as seen while its page is pinned, without waiting. A table whose lock is
/// not free at once is left for later.
fn sweep(table: pg_sys::Oid) {
    let Some(lease) = LeaseTable::open(table, false) else {
        return;
    };
    let heap = lease.heap;
    let pages =
        unsafe { pg_sys::RelationGetNumberOfBlocksInFork(heap, pg_sys::ForkNumber::MAIN_FORKNUM) };
    let sweeps = SWEEPS.get();
    let start = match pages > SWEEP_PAGES {
        // After the table's last page, the first: a window cut short at the end and carried
        // on modulo the size would skip the first pages of that pass, and a growing table
        // could keep skipping the same ones.
        true => match sweeps.next_page {
            Some(next) if next < pages => next,
            Some(_) => 0,
            None => (unsafe { pg_sys::MyProcPid }) as u32 % pages,
        },
        false => 0,
    };
    let retired_before = unguarded::now() - RETENTION_US;
    let columns = lease.columns;
    let retired = |row: &Deformed| {
        row.column(columns.owner).is_none()
            || row
                .available_at(&columns)
                .is_some_and(|at| at < retired_before)
    };
    let mut deleted = 0;
    if pages > 0 {
        unsafe {
            let mut dirty = dirty_snapshot();
            let dirty: pg_sys::Snapshot = &mut dirty;
            let flags = pg_sys::ScanOptions::SO_TYPE_SEQSCAN;
            let scan = pg_sys::heap_beginscan(
                heap,
                dirty,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                flags,
            );
            pg_sys::heap_setscanlimits(scan, start, SWEEP_PAGES.min(pages - start));
            let mut row = Deformed::new(&lease);
            loop {
                let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
                if tuple.is_null() {
                    break;
                }
                // Without page mode, the dirty snapshot tells of this row's own inserter and
                // deleter if they are running; this transaction's own rows are left alone too.
                let settled = (*dirty).xmin == pg_sys::InvalidTransactionId
                    && (*dirty).xmax == pg_sys::InvalidTransactionId
                    && !pg_sys::TransactionIdIsCurrentTransactionId(
                        (*(*tuple).t_data).t_choice.t_heap.t_xmin,
                    );
                // Deleted while the scan pins its page, as a DELETE's scan does: with no MVCC
                // snapshot holding back pruning (the sweep runs at commit), the row's line
                // pointer could otherwise be pruned and given to a row still being inserted
                // before the delete came ("attempted to delete invisible tuple").
                if settled && retired(row.deform(&lease, tuple)) {
                    let mut ctid = (*tuple).t_self;
                    delete_version(heap, &mut ctid);
                    deleted += 1;
                }
            }
            pg_sys::heap_endscan(scan);
        }
    }
    lease.close();
    SWEEPS.set(Sweeps {
        next_page: Some(start + SWEEP_PAGES),
        first_leases: 1,
        every: match deleted {
            0 => (sweeps.every * 2).min(SWEEP_EVERY_MOST),
            _ => SWEEP_EVERY,
        },
    });
}
