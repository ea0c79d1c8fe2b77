//! The shared-memory table of live fenced grants (pid, key, token, scope, since), which the
//! fenced_locks view joins to pg_locks. It exists only when fenced_lock is in
//! shared_preload_libraries; without it, grants are not published and the view shows NULL
//! tokens. Its size is `fenced_lock.max_grants`; when it is full, acquisition still succeeds
//! and the grant is simply not published (the view shows its token as unknown, NULL).
//!
//! Each backend publishes its own grants and removes them when they end (it remembers the slot
//! of each in `grants`); a backend that exits removes what is left; a crash restart
//! re-creates shared memory, and with it an empty table.

use crate::settings;
use crate::shmem::{LwLockGuard, Part};
use crate::types::{LockKey, Scope};
use pgrx::pg_sys;
use pgrx::prelude::*;

const NO_SLOT: u32 = u32::MAX;

/// How much of a text a slot keeps (bytes, cut at a character boundary).
const TEXT_BYTES: usize = 64;

/// A text of at most TEXT_BYTES bytes, in place (shared memory holds no pointers).
#[repr(C)]
#[derive(Clone, Copy)]
struct ShortText {
    len: u8,
    bytes: [u8; TEXT_BYTES],
}

impl ShortText {
    const EMPTY: ShortText = ShortText {
        len: 0,
        bytes: [0; TEXT_BYTES],
    };

    /// The first TEXT_BYTES bytes of `text` or fewer, ending at a character boundary.
    fn new(text: Option<&str>) -> ShortText {
        let text = text.unwrap_or("");
        let mut end = text.len().min(TEXT_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0; TEXT_BYTES];
        bytes[..end].copy_from_slice(&text.as_bytes()[..end]);
        ShortText {
            len: end as u8,
            bytes,
        }
    }

    /// None for the empty text.
    fn get(&self) -> Option<String> {
        (self.len > 0)
            .then(|| String::from_utf8_lossy(&self.bytes[..self.len as usize]).into_owned())
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Slot {
    pid: i32,
    database: pg_sys::Oid,
    ns: i32,
    id: i32,
    token: i64,
    acquired_at: pg_sys::TimestampTz,
    session: bool,
    in_use: bool,
    next_free: u32,
    /// The text of a named key (empty for an (ns, id) key).
    label: ShortText,
    /// The owner a session grant was taken for (empty for none).
    owner: ShortText,
}

#[repr(C)]
struct Table {
    capacity: u32,
    free_head: u32,
    slots: [Slot; 0],
}

static mut TABLE: *mut Table = std::ptr::null_mut();
static mut LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
static TRANCHE: &core::ffi::CStr = c"fenced_lock";

fn table_size(capacity: u32) -> usize {
    std::mem::size_of::<Table>() + capacity as usize * std::mem::size_of::<Slot>()
}

/// The table and its lock in shared memory (shmem.rs).
pub const GRANTS_PART: Part = Part { request, place };

fn request() {
    unsafe {
        pg_sys::RequestAddinShmemSpace(table_size(settings::max_grants()));
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

/// Finds, or creates and fills, the table.
fn place() {
    unsafe {
        let capacity = settings::max_grants();
        let mut found = false;
        let table = pg_sys::ShmemInitStruct(
            c"fenced_lock grants".as_ptr(),
            table_size(capacity),
            &mut found,
        ) as *mut Table;
        if !found {
            (*table).capacity = capacity;
            (*table).free_head = if capacity == 0 { NO_SLOT } else { 0 };
            let slots = (*table).slots.as_mut_ptr();
            for index in 0..capacity {
                let next_free = if index + 1 < capacity {
                    index + 1
                } else {
                    NO_SLOT
                };
                slots.add(index as usize).write(Slot {
                    pid: 0,
                    database: pg_sys::InvalidOid,
                    ns: 0,
                    id: 0,
                    token: 0,
                    acquired_at: 0,
                    session: false,
                    in_use: false,
                    next_free,
                    label: ShortText::EMPTY,
                    owner: ShortText::EMPTY,
                });
            }
        }
        TABLE = table;
        LOCK = &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock;
    }
}

fn available() -> bool {
    unsafe { !TABLE.is_null() }
}

/// Runs `work` on the table under its lock in `mode`; None when there is no table.
fn with_table<R>(
    mode: pg_sys::LWLockMode::Type,
    work: impl FnOnce(&mut Table, &mut [Slot]) -> R,
) -> Option<R> {
    if !available() {
        return None;
    }
    unsafe {
        let _locked = LwLockGuard::acquire(LOCK, mode);
        let table = &mut *TABLE;
        let slots =
            std::slice::from_raw_parts_mut(table.slots.as_mut_ptr(), table.capacity as usize);
        Some(work(&mut *TABLE, slots))
    }
}

/// Publishes a grant of this backend; its slot, or None (no table, or the table is full).
pub fn publish(
    key: LockKey,
    label: Option<&str>,
    owner: Option<&str>,
    token: i64,
    scope: Scope,
) -> Option<u32> {
    if !available() {
        return None;
    }
    let (label, owner) = (ShortText::new(label), ShortText::new(owner));
    let acquired_at = unsafe { pg_sys::GetCurrentTimestamp() };
    let (pid, database) = unsafe { (pg_sys::MyProcPid, pg_sys::MyDatabaseId) };
    with_table(pg_sys::LWLockMode::LW_EXCLUSIVE, |table, slots| {
        let index = table.free_head;
        if index == NO_SLOT {
            return None;
        }
        let slot = &mut slots[index as usize];
        table.free_head = slot.next_free;
        *slot = Slot {
            pid,
            database,
            ns: key.ns,
            id: key.id,
            token,
            acquired_at,
            session: scope == Scope::Session,
            in_use: true,
            next_free: NO_SLOT,
            label,
            owner,
        };
        Some(index)
    })
    .flatten()
}

/// Removes grants this backend published.
pub fn withdraw(indexes: impl IntoIterator<Item = u32>) {
    let mut indexes = indexes.into_iter().peekable();
    if indexes.peek().is_none() {
        return;
    }
    let pid = unsafe { pg_sys::MyProcPid };
    with_table(pg_sys::LWLockMode::LW_EXCLUSIVE, |table, slots| {
        for index in indexes {
            let slot = &mut slots[index as usize];
            // Only this backend's own slot: never free another backend's grant.
            if slot.in_use && slot.pid == pid {
                slot.in_use = false;
                slot.next_free = table.free_head;
                table.free_head = index;
            }
        }
    });
}

/// A live grant as the table holds it.
pub struct Grant {
    pub pid: i32,
    pub key: LockKey,
    pub token: i64,
    pub scope: Scope,
    pub acquired_at: TimestampWithTimeZone,
    /// The text of a named key (its first 64 bytes).
    pub label: Option<String>,
    /// The owner of a session grant (its first 64 bytes).
    pub owner: Option<String>,
}

/// The live fenced grants of the current database, copied out under a shared lock (brief:
/// one pass over the table); empty when there is no table.
pub fn live_grants() -> Vec<Grant> {
    let database = unsafe { pg_sys::MyDatabaseId };
    let live: Vec<Slot> = with_table(pg_sys::LWLockMode::LW_SHARED, |_, slots| {
        slots
            .iter()
            .filter(|slot| slot.in_use && slot.database == database)
            .copied()
            .collect()
    })
    .unwrap_or_default();
    live.into_iter()
        .map(|slot| Grant {
            pid: slot.pid,
            key: LockKey {
                ns: slot.ns,
                id: slot.id,
            },
            token: slot.token,
            scope: match slot.session {
                true => Scope::Session,
                false => Scope::Transaction,
            },
            acquired_at: unsafe {
                TimestampWithTimeZone::from_datum(pg_sys::Datum::from(slot.acquired_at), false)
            }
            .expect("a timestamp"),
            label: slot.label.get(),
            owner: slot.owner.get(),
        })
        .collect()
}

/// The live fenced grants of the current database as (pid, ns, id, token, scope,
/// acquired_at, key, owner): `key` is the text of a named key, NULL for an (ns, id) key;
/// `owner` the owner a session grant was taken for (each their first 64 bytes).
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted)]
fn fenced_lock_grants() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(ns, i32),
        name!(id, i32),
        name!(token, i64),
        name!(scope, &'static str),
        name!(acquired_at, TimestampWithTimeZone),
        name!(key, Option<String>),
        name!(owner, Option<String>),
    ),
> {
    TableIterator::new(live_grants().into_iter().map(|grant| {
        (
            grant.pid,
            grant.key.ns,
            grant.key.id,
            grant.token,
            grant.scope.name(),
            grant.acquired_at,
            grant.label,
            grant.owner,
        )
    }))
}

/// Whether this server keeps the grants table (fenced_lock is preloaded).
#[pg_extern(stable, parallel_safe)]
fn fenced_lock_grants_available() -> bool {
    available()
}
