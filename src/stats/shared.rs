//! The two counter tables in shared memory (namespaces, refusals), when preloaded. An entry
//! is claimed once per key, under the table's LWLock, and kept until the server stops (a
//! reset zeroes its counters, not its key); its counters are atomics, folded into without a
//! lock. Entry 0 of each table counts every key that found the table full ("other").
//!
//! A clean shutdown writes both tables to `pg_stat/fenced_lock.stat` (as pg_stat_statements
//! keeps its own file); the next start reads it back and removes it, so a crash (which
//! writes nothing) starts from zero, as PostgreSQL's own statistics do.

use super::{Fold, COUNTERS};
use crate::shmem::{LwLockGuard, Part};
use pgrx::pg_sys;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

/// The key of an entry: (database, object, detail), all 0 while the entry is free.
pub type EntryKey = [u32; 3];

#[repr(C)]
pub struct Entry {
    key: [AtomicU32; 3],
    pub counters: [AtomicI64; COUNTERS],
    /// When the refusal log last wrote a line for this entry (`log.rs`), and how many
    /// refusals it did not write since.
    pub logged_at: AtomicI64,
    pub unlogged: AtomicI64,
}

#[repr(C)]
pub struct Table {
    lock: *mut pg_sys::LWLock,
    capacity: u32,
    /// Entries claimed (entry 0, "other", from the start); published with release order
    /// after the entry's key is written.
    used: AtomicU32,
    reset_at: AtomicI64,
    entries: [Entry; 0],
}

impl Table {
    fn entries(&self) -> &[Entry] {
        unsafe { std::slice::from_raw_parts(self.entries.as_ptr(), self.capacity as usize) }
    }

    /// The entries claimed so far, with their keys.
    pub fn claimed(&self) -> impl Iterator<Item = (EntryKey, &Entry)> {
        let used = self.used.load(Ordering::Acquire) as usize;
        self.entries()[..used].iter().map(|entry| {
            (
                entry.key.each_ref().map(|k| k.load(Ordering::Relaxed)),
                entry,
            )
        })
    }

    pub fn entry(&self, index: usize) -> &Entry {
        &self.entries()[index]
    }

    /// The index of `key`'s entry, claimed now if it has none; 0 ("other") when full.
    pub fn index_of(&self, key: EntryKey) -> usize {
        let find = |table: &Table| table.claimed().position(|(claimed, _)| claimed == key);
        if let Some(index) = find(self) {
            return index;
        }
        let _claiming = LwLockGuard::acquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        if let Some(index) = find(self) {
            return index;
        }
        let used = self.used.load(Ordering::Relaxed);
        if used >= self.capacity {
            return 0;
        }
        let entry = &self.entries()[used as usize];
        for (word, value) in entry.key.iter().zip(key) {
            word.store(value, Ordering::Relaxed);
        }
        self.used.store(used + 1, Ordering::Release);
        used as usize
    }

    /// Adds `values` (the counters marked in `set`) to entry `index` as `folds` say.
    pub fn fold(&self, index: usize, folds: &[Fold], values: &[i64; COUNTERS], set: u32) {
        let entry = self.entry(index);
        for (number, fold) in folds.iter().enumerate() {
            if set & (1 << number) == 0 {
                continue;
            }
            let (counter, value) = (&entry.counters[number], values[number]);
            match fold {
                Fold::Sum => counter.fetch_add(value, Ordering::Relaxed),
                Fold::Max => counter.fetch_max(value, Ordering::Relaxed),
                Fold::Last => counter.swap(value, Ordering::Relaxed),
            };
        }
    }

    /// Zeroes every counter (keys stay) and records when.
    pub fn reset(&self, at: pg_sys::TimestampTz) {
        self.claimed()
            .flat_map(|(_, entry)| entry.counters.iter())
            .for_each(|counter| counter.store(0, Ordering::Relaxed));
        self.reset_at.store(at, Ordering::Relaxed);
    }

    pub fn reset_at(&self) -> pg_sys::TimestampTz {
        self.reset_at.load(Ordering::Relaxed)
    }
}

/// The key of entry 0, counting every key that found its table full.
pub const OTHER: EntryKey = [0, 0, u32::MAX];

/// One table's place in shared memory: its name, its tranche and its capacity (a setting).
pub struct Place {
    name: &'static core::ffi::CStr,
    capacity: fn() -> u32,
    table: std::sync::atomic::AtomicPtr<Table>,
}

impl Place {
    pub const fn new(name: &'static core::ffi::CStr, capacity: fn() -> u32) -> Place {
        Place {
            name,
            capacity,
            table: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The table, or None when fenced_lock was not preloaded.
    pub fn table(&self) -> Option<&'static Table> {
        unsafe { self.table.load(Ordering::Relaxed).as_ref() }
    }

    fn size(&self) -> usize {
        // "other" besides the setting's entries.
        std::mem::size_of::<Table>() + ((self.capacity)() as usize + 1) * size_of::<Entry>()
    }

    fn request(&self) {
        unsafe {
            pg_sys::RequestAddinShmemSpace(self.size());
            pg_sys::RequestNamedLWLockTranche(self.name.as_ptr(), 1);
        }
    }

    fn place(&self) {
        unsafe {
            let mut found = false;
            let table =
                pg_sys::ShmemInitStruct(self.name.as_ptr(), self.size(), &mut found) as *mut Table;
            if !found {
                std::ptr::write_bytes(table as *mut u8, 0, self.size());
                (*table).lock = &raw mut (*pg_sys::GetNamedLWLockTranche(self.name.as_ptr())).lock;
                (*table).capacity = (self.capacity)() + 1;
                (*table).reset_at = AtomicI64::new(pg_sys::GetCurrentTimestamp());
                let other = &(*table).entries()[0];
                for (word, value) in other.key.iter().zip(OTHER) {
                    word.store(value, Ordering::Relaxed);
                }
                (*table).used = AtomicU32::new(1);
            }
            self.table.store(table, Ordering::Relaxed);
        }
    }
}

pub static NAMESPACES: Place = Place::new(c"fenced_lock namespace stats", || {
    crate::settings::stats_max_namespaces()
});
pub static REFUSALS: Place = Place::new(c"fenced_lock refusal stats", || {
    crate::settings::stats_max_tables()
});

/// Both tables in shared memory (shmem.rs); the postmaster reads back what the last clean
/// shutdown wrote, and writes it at the next.
pub const STATS_PART: Part = Part {
    request: || {
        [&NAMESPACES, &REFUSALS]
            .iter()
            .for_each(|place| place.request())
    },
    place: || {
        [&NAMESPACES, &REFUSALS]
            .iter()
            .for_each(|place| place.place());
        if !unsafe { pg_sys::IsUnderPostmaster } {
            read_file();
            unsafe { pg_sys::on_shmem_exit(Some(write_file), pg_sys::Datum::from(0)) };
        }
    },
};

/// In the data directory (the server's working directory), beside PostgreSQL's own.
const FILE: &str = "pg_stat/fenced_lock.stat";
/// Changes whenever the file's layout does (a file of another layout is not read).
const MAGIC: u32 = 0x464c_5301 + COUNTERS as u32;

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn write_file(code: i32, _arg: pg_sys::Datum) {
    // Only at a clean shutdown: after a crash shared memory is not to be trusted, and after an
    // immediate shutdown (which the postmaster ends with code 0 too) PostgreSQL's own
    // statistics start from zero, as these do then.
    if code != 0 || !shut_down_cleanly() {
        return;
    }
    let mut bytes = MAGIC.to_le_bytes().to_vec();
    for place in [&NAMESPACES, &REFUSALS] {
        let Some(table) = place.table() else { return };
        let claimed: Vec<_> = table.claimed().collect();
        bytes.extend(table.reset_at().to_le_bytes());
        bytes.extend((claimed.len() as u32).to_le_bytes());
        for (key, entry) in claimed {
            key.iter().for_each(|word| bytes.extend(word.to_le_bytes()));
            (entry.counters.iter())
                .for_each(|counter| bytes.extend(counter.load(Ordering::Relaxed).to_le_bytes()));
        }
    }
    let temporary = format!("{FILE}.tmp");
    let written = std::fs::File::create(&temporary)
        .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()))
        .and_then(|()| std::fs::rename(&temporary, FILE));
    if let Err(error) = written {
        pgrx::log!("fenced_lock: could not write {FILE}: {error}");
    }
}

/// Whether the control file says the server was shut down cleanly (its shutdown checkpoint
/// written), as a primary or as a standby.
fn shut_down_cleanly() -> bool {
    pgrx::PgTryBuilder::new(|| unsafe {
        let mut crc_ok = false;
        let control = pg_sys::get_controlfile(pg_sys::DataDir, &mut crc_ok);
        use pg_sys::DBState::{DB_SHUTDOWNED, DB_SHUTDOWNED_IN_RECOVERY};
        crc_ok && matches!((*control).state, DB_SHUTDOWNED | DB_SHUTDOWNED_IN_RECOVERY)
    })
    .catch_others(|_| false)
    .execute()
}

/// Reads back the file the last clean shutdown wrote, then removes it. A file that does not
/// read whole is ignored (with a LOG line), and the counters start from zero.
fn read_file() {
    let mut bytes = Vec::new();
    match std::fs::File::open(FILE).and_then(|mut file| file.read_to_end(&mut bytes)) {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
        Err(error) => return pgrx::log!("fenced_lock: could not read {FILE}: {error}"),
    }
    let _ = std::fs::remove_file(FILE);
    if restore(&bytes).is_none() {
        pgrx::log!("fenced_lock: ignored {FILE}, which is not a whole file of this version");
    }
}

/// The file's bytes in order.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, tail) = self.0.split_at_checked(N)?;
        self.0 = tail;
        head.try_into().ok()
    }

    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_le_bytes)
    }
}

fn restore(bytes: &[u8]) -> Option<()> {
    let mut cursor = Cursor(bytes);
    if cursor.u32()? != MAGIC {
        return None;
    }
    // Read whole before anything is restored: a cut file restores nothing.
    let mut tables = Vec::new();
    for _ in 0..2 {
        let reset_at = cursor.i64()?;
        let mut entries = Vec::new();
        for _ in 0..cursor.u32()? {
            let key = [cursor.u32()?, cursor.u32()?, cursor.u32()?];
            let mut counters = [0i64; COUNTERS];
            for counter in counters.iter_mut() {
                *counter = cursor.i64()?;
            }
            entries.push((key, counters));
        }
        tables.push((reset_at, entries));
    }
    for (place, (reset_at, entries)) in [&NAMESPACES, &REFUSALS].into_iter().zip(tables) {
        let table = place.table()?;
        table.reset_at.store(reset_at, Ordering::Relaxed);
        for (key, counters) in entries {
            // Into empty counters: as the file has them, whatever their fold.
            let entry = table.entry(table.index_of(key));
            for (counter, value) in entry.counters.iter().zip(counters) {
                counter.fetch_add(value, Ordering::Relaxed);
            }
        }
    }
    Some(())
}
