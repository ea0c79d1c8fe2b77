//! The two counter tables in shared memory (namespaces, refusals), when preloaded, and the
//! refusal log's limits. A key's entry is found through a hash index (open addressing over
//! entry numbers) under the table's LWLock, shared for a lookup and a fold, exclusive to
//! claim an entry or free some: a backend keeps no entry number across its transactions, so
//! entries can be freed and the table compacted at any time. Entry 0 of each table counts every
//! key that found no entry ("other"): the table was full, or the key's database had its share.
//!
//! A database claims at most half of a table's entries, so that no role that can connect fills
//! the table for every other database. A reset frees every entry; rows of dropped databases
//! (and of dropped tables of the database that reads them) are freed when a view is read.
//!
//! A clean shutdown writes both tables' entries with counts to `pg_stat/fenced_lock.stat` (as
//! pg_stat_statements keeps its own file); the next start reads it back and removes it, so a
//! crash (which writes nothing) starts from zero, as PostgreSQL's own statistics do.

use super::{Fold, COUNTERS};
use crate::shmem::{LwLockGuard, Part};
use pgrx::pg_sys;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// The key of an entry: (database, object, detail).
pub type EntryKey = [u32; 3];

#[repr(C)]
pub struct Entry {
    key: [AtomicU32; 3],
    pub counters: [AtomicI64; COUNTERS],
}

impl Entry {
    fn key(&self) -> EntryKey {
        self.key.each_ref().map(|word| word.load(Ordering::Relaxed))
    }

    fn set(&self, key: EntryKey, counters: &[i64; COUNTERS]) {
        for (word, value) in self.key.iter().zip(key) {
            word.store(value, Ordering::Relaxed);
        }
        for (counter, &value) in self.counters.iter().zip(counters) {
            counter.store(value, Ordering::Relaxed);
        }
    }

    fn counts(&self) -> [i64; COUNTERS] {
        self.counters
            .each_ref()
            .map(|counter| counter.load(Ordering::Relaxed))
    }
}

/// One table: `capacity` entries (entry 0 is "other"), then `buckets` (a power of two, at least
/// twice the capacity) entry numbers + 1, 0 for an empty bucket.
#[repr(C)]
pub struct Table {
    lock: *mut pg_sys::LWLock,
    capacity: u32,
    buckets: u32,
    /// Entries in use, "other" included; changed only under the exclusive lock.
    used: AtomicU32,
    reset_at: AtomicI64,
    entries: [Entry; 0],
}

/// A backend's counts of one key, to fold into its entry.
pub struct Counts<'a> {
    pub key: EntryKey,
    pub values: &'a [i64; COUNTERS],
    /// The counters `values` set.
    pub touched: u32,
}

impl Table {
    fn entries(&self) -> &[Entry] {
        unsafe { std::slice::from_raw_parts(self.entries.as_ptr(), self.capacity as usize) }
    }

    fn bucket_array(&self) -> &[AtomicU32] {
        unsafe {
            let after = self.entries.as_ptr().add(self.capacity as usize);
            std::slice::from_raw_parts(after.cast::<AtomicU32>(), self.buckets as usize)
        }
    }

    /// The bucket a probe for `key` starts at.
    fn home(&self, key: EntryKey) -> usize {
        key_hash(key) as usize & (self.buckets as usize - 1)
    }

    /// The entry of `key`, if it has one. Under the lock (either mode).
    fn find(&self, key: EntryKey) -> Option<usize> {
        let (buckets, entries) = (self.bucket_array(), self.entries());
        let mask = buckets.len() - 1;
        let mut at = self.home(key);
        loop {
            match buckets[at].load(Ordering::Relaxed) {
                0 => return None,
                number if entries[number as usize - 1].key() == key => {
                    return Some(number as usize - 1)
                }
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// Gives `key` entry `index` in the hash index. Under the exclusive lock.
    fn index(&self, key: EntryKey, index: usize) {
        let buckets = self.bucket_array();
        let mask = buckets.len() - 1;
        let mut at = self.home(key);
        while buckets[at].load(Ordering::Relaxed) != 0 {
            at = (at + 1) & mask;
        }
        buckets[at].store(index as u32 + 1, Ordering::Relaxed);
    }

    /// A new entry for `key` with `counters`, or None when the table is full or the key's
    /// database has its share (`database_rows` of them already, counted by the caller). Under
    /// the exclusive lock.
    fn claim(
        &self,
        key: EntryKey,
        counters: &[i64; COUNTERS],
        database_rows: u32,
    ) -> Option<usize> {
        let used = self.used.load(Ordering::Relaxed);
        if used >= self.capacity || database_rows >= self.database_share() {
            return None;
        }
        self.entries()[used as usize].set(key, counters);
        self.index(key, used as usize);
        self.used.store(used + 1, Ordering::Relaxed);
        Some(used as usize)
    }

    /// The entries one database may claim: half of the table (at least one).
    fn database_share(&self) -> u32 {
        ((self.capacity - 1) / 2).max(1)
    }

    /// Entries in use by `database`. Under the lock.
    fn rows_of(&self, database: u32) -> u32 {
        let used = self.used.load(Ordering::Relaxed) as usize;
        self.entries()[1..used]
            .iter()
            .filter(|entry| entry.key[0].load(Ordering::Relaxed) == database)
            .count() as u32
    }

    /// Folds each of `counts` into its key's entry (claimed now if it has none; "other" when
    /// none can be claimed), as `folds` say.
    pub fn fold_all(&self, folds: &[Fold], counts: &[Counts]) {
        let mut unfound = Vec::new();
        {
            let _shared = LwLockGuard::acquire(self.lock, pg_sys::LWLockMode::LW_SHARED);
            let full = self.used.load(Ordering::Relaxed) >= self.capacity;
            for (number, one) in counts.iter().enumerate() {
                match self.find(one.key) {
                    Some(index) => self.fold(index, folds, one),
                    // Nothing could be claimed: straight to "other", with no exclusive lock.
                    None if full => self.fold(0, folds, one),
                    None => unfound.push(number),
                }
            }
        }
        if unfound.is_empty() {
            return;
        }
        let _exclusive = LwLockGuard::acquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut database_rows: Vec<(u32, u32)> = Vec::new();
        for number in unfound {
            let one = &counts[number];
            let index = self.find(one.key).unwrap_or_else(|| {
                let database = one.key[0];
                let at = match database_rows.iter().position(|&(db, _)| db == database) {
                    Some(at) => at,
                    None => {
                        database_rows.push((database, self.rows_of(database)));
                        database_rows.len() - 1
                    }
                };
                let claimed = self.claim(one.key, &[0; COUNTERS], database_rows[at].1);
                if claimed.is_some() {
                    database_rows[at].1 += 1;
                }
                claimed.unwrap_or(0)
            });
            self.fold(index, folds, one);
        }
    }

    /// Adds `counts` (the counters it touched) to entry `index` as `folds` say.
    fn fold(&self, index: usize, folds: &[Fold], counts: &Counts) {
        let entry = &self.entries()[index];
        for (number, fold) in folds.iter().enumerate() {
            if counts.touched & (1 << number) == 0 {
                continue;
            }
            let (counter, value) = (&entry.counters[number], counts.values[number]);
            match fold {
                Fold::Sum => counter.fetch_add(value, Ordering::Relaxed),
                Fold::Max => counter.fetch_max(value, Ordering::Relaxed),
                Fold::Last => counter.swap(value, Ordering::Relaxed),
            };
        }
    }

    /// Every entry in use, "other" first: its key and counters, copied under the shared lock.
    pub fn rows(&self) -> Vec<(EntryKey, [i64; COUNTERS])> {
        let _shared = LwLockGuard::acquire(self.lock, pg_sys::LWLockMode::LW_SHARED);
        let used = self.used.load(Ordering::Relaxed) as usize;
        (self.entries()[..used].iter())
            .map(|entry| (entry.key(), entry.counts()))
            .collect()
    }

    /// Frees the entries of the keys `gone` says are gone (never "other"), moving the others
    /// together and indexing them anew.
    pub fn free(&self, gone: impl Fn(EntryKey) -> bool) {
        let _exclusive = LwLockGuard::acquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let used = self.used.load(Ordering::Relaxed) as usize;
        let kept: Vec<(EntryKey, [i64; COUNTERS])> = (self.entries()[1..used].iter())
            .map(|entry| (entry.key(), entry.counts()))
            .filter(|&(key, _)| !gone(key))
            .collect();
        if kept.len() + 1 == used {
            return;
        }
        self.rebuild(&kept);
    }

    /// The table holding "other" (its counters as they are) and `kept`, in that order. Under
    /// the exclusive lock.
    fn rebuild(&self, kept: &[(EntryKey, [i64; COUNTERS])]) {
        let used = self.used.load(Ordering::Relaxed) as usize;
        for (entry, (key, counters)) in self.entries()[1..].iter().zip(kept) {
            entry.set(*key, counters);
        }
        for entry in &self.entries()[1 + kept.len()..used] {
            entry.set([0; 3], &[0; COUNTERS]);
        }
        for bucket in self.bucket_array() {
            bucket.store(0, Ordering::Relaxed);
        }
        for (index, (key, _)) in kept.iter().enumerate() {
            self.index(*key, index + 1);
        }
        self.used.store(1 + kept.len() as u32, Ordering::Relaxed);
    }

    /// Frees every entry, zeroes "other", and records when.
    pub fn reset(&self, at: pg_sys::TimestampTz) {
        let _exclusive = LwLockGuard::acquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        self.entries()[0].set(OTHER, &[0; COUNTERS]);
        self.rebuild(&[]);
        self.reset_at.store(at, Ordering::Relaxed);
    }

    pub fn reset_at(&self) -> pg_sys::TimestampTz {
        self.reset_at.load(Ordering::Relaxed)
    }

    /// Adds `counters` to `key`'s entry (claimed if it has none, else "other"), as they are:
    /// restoring the file, whatever each counter's fold.
    fn restore(&self, key: EntryKey, counters: &[i64; COUNTERS]) {
        let _exclusive = LwLockGuard::acquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let index = match key {
            OTHER => 0,
            key => (self.find(key))
                .or_else(|| self.claim(key, &[0; COUNTERS], self.rows_of(key[0])))
                .unwrap_or(0),
        };
        for (counter, &value) in self.entries()[index].counters.iter().zip(counters) {
            counter.fetch_add(value, Ordering::Relaxed);
        }
    }
}

/// The hash of an entry's key, for the tables' index and the refusal log's slots.
fn key_hash(key: EntryKey) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(key)
}

/// The key of entry 0, counting every key that found no entry.
pub const OTHER: EntryKey = [0, 0, u32::MAX];

/// The refusal log's limit, one line a second per (database, table, check): slots found by
/// the key's hash, each taken by the key that last logged there. Two keys that share a slot
/// both log more often, never less. No lock: a race between two refusals of one key can log
/// one line more.
#[repr(C)]
pub struct LogLimits {
    slots: [LogSlot; LOG_SLOTS],
}

#[repr(C)]
struct LogSlot {
    /// The key's hash (never 0), or 0 for a slot never used.
    key: AtomicU64,
    logged_at: AtomicI64,
    unlogged: AtomicI64,
}

const LOG_SLOTS: usize = 4096;

impl LogLimits {
    /// Whether a refusal of `key` at `now` is logged (at most one line per key every
    /// `interval`), and if so how many it stands for that were not; None: not logged.
    pub fn due(&self, key: EntryKey, now: i64, interval: i64) -> Option<i64> {
        let hash = key_hash(key).max(1);
        let slot = &self.slots[hash as usize % LOG_SLOTS];
        let owner = slot.key.load(Ordering::Relaxed);
        if owner != hash {
            // The key's first line here (or the slot was another key's): logged.
            if slot
                .key
                .compare_exchange(owner, hash, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                slot.logged_at.store(now, Ordering::Relaxed);
                slot.unlogged.store(0, Ordering::Relaxed);
            }
            return Some(0);
        }
        let last = slot.logged_at.load(Ordering::Relaxed);
        let logged = now - last >= interval
            && (slot.logged_at)
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        match logged {
            true => Some(slot.unlogged.swap(0, Ordering::Relaxed)),
            false => {
                slot.unlogged.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

static LOG_LIMITS: std::sync::atomic::AtomicPtr<LogLimits> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The refusal log's limits, or None when fenced_lock was not preloaded.
pub fn log_limits() -> Option<&'static LogLimits> {
    unsafe { LOG_LIMITS.load(Ordering::Relaxed).as_ref() }
}

const LOG_LIMITS_NAME: &core::ffi::CStr = c"fenced_lock refusal log";

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

    /// Entries ("other" besides the setting's) and buckets.
    fn shape(&self) -> (u32, u32) {
        let capacity = (self.capacity)() + 1;
        (capacity, (capacity * 2).next_power_of_two())
    }

    fn size(&self) -> usize {
        let (capacity, buckets) = self.shape();
        std::mem::size_of::<Table>()
            + capacity as usize * size_of::<Entry>()
            + buckets as usize * size_of::<AtomicU32>()
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
                ((*table).capacity, (*table).buckets) = self.shape();
                (*table).reset_at = AtomicI64::new(pg_sys::GetCurrentTimestamp());
                (*table).entries()[0].set(OTHER, &[0; COUNTERS]);
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
            .for_each(|place| place.request());
        unsafe { pg_sys::RequestAddinShmemSpace(size_of::<LogLimits>()) };
    },
    place: || {
        [&NAMESPACES, &REFUSALS]
            .iter()
            .for_each(|place| place.place());
        unsafe {
            let mut found = false;
            let limits = pg_sys::ShmemInitStruct(
                LOG_LIMITS_NAME.as_ptr(),
                size_of::<LogLimits>(),
                &mut found,
            ) as *mut LogLimits;
            if !found {
                std::ptr::write_bytes(limits as *mut u8, 0, size_of::<LogLimits>());
            }
            LOG_LIMITS.store(limits, Ordering::Relaxed);
        }
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
        // Rows with nothing counted are not kept: they would take entries back for nothing.
        let rows: Vec<_> = (table.rows().into_iter())
            .filter(|(_, counters)| counters.iter().any(|&counter| counter != 0))
            .collect();
        bytes.extend(table.reset_at().to_le_bytes());
        bytes.extend((rows.len() as u32).to_le_bytes());
        for (key, counters) in rows {
            key.iter().for_each(|word| bytes.extend(word.to_le_bytes()));
            counters
                .iter()
                .for_each(|counter| bytes.extend(counter.to_le_bytes()));
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
            table.restore(key, &counters);
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_logs_a_line_a_second_that_counts_the_refusals_it_did_not_log() {
        // Safety: all-zero is the state ShmemInitStruct's caller leaves the slots in.
        let limits: Box<LogLimits> = unsafe { Box::new(std::mem::zeroed()) };
        let (old, new) = ([1, 10, 1], [1, 11, 1]);
        assert_eq!(limits.due(old, 0, 1000), Some(0));
        assert_eq!(
            limits.due(new, 10, 1000),
            Some(0),
            "another table: a line of its own"
        );
        assert_eq!(limits.due(old, 20, 1000), None);
        assert_eq!(limits.due(old, 30, 1000), None);
        assert_eq!(limits.due(new, 40, 1000), None);
        assert_eq!(limits.due(old, 1000, 1000), Some(2));
        assert_eq!(limits.due(new, 1010, 1000), Some(1));
    }
}
