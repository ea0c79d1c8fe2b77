//! The shared-memory table of live fenced grants (pid, key, token, scope, since), which the
//! fenced_locks view joins to pg_locks. It exists only when fenced_lock is in
//! shared_preload_libraries; without it, grants are not published and the view shows NULL
//! tokens. Its size is `fenced_lock.max_grants`; when it is full, acquisition still succeeds
//! and the grant is simply not published (the view shows its token as unknown, NULL).
//!
//! Each backend publishes its own grants and removes them when they end (it remembers the slot
//! of each in `grants`); a backend that exits removes what is left; a crash restart
//! re-creates shared memory, and with it an empty table.
//!
//! No lock: a backend claims a free slot with a compare-and-swap of its pid (starting where its
//! last grant was, or at its pid modulo the table's size, so backends keep apart) and only it
//! writes that slot, inside a change count that is odd while it writes. Each chunk of 64 slots
//! counts its claimed slots, and readers copy only chunks whose count is not 0, so a read
//! costs the grants live, not `max_grants`. A reader copies a slot
//! between two readings of an even, equal count; a slot that changed meanwhile was being
//! published or withdrawn, and is read as not there (as it was, or will be, a moment later).
//! The slot's grant is stored as atomic words, written and copied with relaxed atomic
//! operations between the count's release and acquire orderings (a seqlock): a copy that races
//! a write is a data race in no memory model, and is only read as a grant once the count shows
//! it is whole.

use crate::settings;
use crate::shmem::Part;
use crate::types::{LockKey, Lockable, Mode, NewGrant, Scope};
use pgrx::pg_sys;
use pgrx::prelude::*;
use rustc_hash::FxHashMap;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

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

/// What a slot holds while its grant is published. Without padding (the eight-byte fields
/// first, 168 bytes in all), so that every byte of it is one of its words (`WORDS`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Published {
    token: i64,
    acquired_at: pg_sys::TimestampTz,
    database: pg_sys::Oid,
    ns: i32,
    id: i32,
    /// The permit's slot; 0 for the key's advisory lock.
    permit: u16,
    session: bool,
    live: bool,
    shared: bool,
    /// The text of a named key (empty for an (ns, id) key).
    label: ShortText,
    /// The owner a session grant was taken for (empty for none).
    owner: ShortText,
    /// Always zero: the words' last bytes.
    spare: [u8; 5],
}

/// A grant as the words a slot keeps it in.
const WORDS: usize = std::mem::size_of::<Published>() / 8;
const _: () = assert!(std::mem::size_of::<Published>() == 168 && WORDS * 8 == 168);

impl Published {
    fn into_words(self) -> [u64; WORDS] {
        // Sound: Published has no padding (above), so every byte is initialised.
        unsafe { std::mem::transmute::<Published, [u64; WORDS]>(self) }
    }

    /// # Safety
    /// `words` must be a whole copy of a Published (its booleans 0 or 1).
    unsafe fn from_words(words: [u64; WORDS]) -> Published {
        unsafe { std::mem::transmute::<[u64; WORDS], Published>(words) }
    }
}

#[repr(C)]
struct Slot {
    /// The pid of the backend whose slot this is (the grant's), 0 while free.
    claimed_by: AtomicU32,
    /// Odd while the claiming backend writes `published`.
    changes: AtomicU32,
    published: [AtomicU64; WORDS],
}

impl Slot {
    /// Writes `words` (index, value) of the slot (its claiming backend only), inside an odd
    /// change count: the release fence orders the odd count before the words, the release
    /// store the words before the even count.
    fn write(&self, words: impl Iterator<Item = (usize, u64)>) {
        let changes = self.changes.load(Ordering::Relaxed);
        self.changes
            .store(changes.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (index, value) in words {
            self.published[index].store(value, Ordering::Relaxed);
        }
        self.changes
            .store(changes.wrapping_add(2), Ordering::Release);
    }

    /// Publishes `published`, every word of it.
    fn publish(&self, published: Published) {
        self.write(published.into_words().into_iter().enumerate());
    }

    /// Marks the slot's grant withdrawn: one word, the one `live` is in.
    fn withdraw(&self) {
        const LIVE: usize = std::mem::offset_of!(Published, live);
        let word = self.published[LIVE / 8].load(Ordering::Relaxed);
        let mut bytes = word.to_ne_bytes();
        bytes[LIVE % 8] = false as u8;
        self.write(std::iter::once((LIVE / 8, u64::from_ne_bytes(bytes))));
    }

    /// The slot's words as they are now (whole only if no write overlapped the copy).
    fn words(&self) -> [u64; WORDS] {
        (self.published.each_ref()).map(|word| word.load(Ordering::Relaxed))
    }

    /// The pid and a copy of the slot's grant, if it is live and did not change while copied
    /// (a slot withdrawn and claimed again meanwhile has a new change count too): the acquire
    /// load orders the first count before the words, the acquire fence the words before the
    /// second count, so an equal, even count means no write overlapped the copy.
    fn read(&self) -> Option<(i32, Published)> {
        let before = self.changes.load(Ordering::Acquire);
        let pid = self.claimed_by.load(Ordering::Relaxed);
        if before % 2 == 1 || pid == 0 {
            return None;
        }
        let words = self.words();
        fence(Ordering::Acquire);
        if self.changes.load(Ordering::Relaxed) != before {
            return None;
        }
        let published = unsafe { Published::from_words(words) };
        published.live.then_some((pid as i32, published))
    }
}

/// The size fenced_lock.max_grants' description gives.
const _: () = assert!(std::mem::size_of::<Slot>() == 176);

#[repr(C)]
struct Table {
    capacity: u32,
    /// Slots claimed: a publish reserves one here first, so a full table is known at once
    /// (without a search) and a reserved slot is always there to be found.
    claimed: AtomicU32,
    /// `capacity` slots, then a claim count per CHUNK slots (`chunks`).
    slots: [Slot; 0],
}

/// Slots per claim count: readers skip a chunk whose count is 0 without reading its slots.
const CHUNK: usize = 64;

/// A chunk's count of claimed slots, on a cache line of its own: backends publishing in
/// neighbouring chunks would otherwise write one line between them.
#[repr(C, align(64))]
struct ChunkCount(AtomicU32);

fn chunk_count(capacity: u32) -> usize {
    (capacity as usize).div_ceil(CHUNK)
}

static mut TABLE: *mut Table = std::ptr::null_mut();

thread_local! {
    /// Where this backend looks for a free slot first: after its last grant's, or its lowest
    /// freed one (so its grants stay together in a few chunks, not spread grant after grant).
    static FIRST_LOOK: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

fn table_size(capacity: u32) -> usize {
    std::mem::size_of::<Table>()
        + capacity as usize * std::mem::size_of::<Slot>()
        + std::mem::align_of::<ChunkCount>()
        + chunk_count(capacity) * std::mem::size_of::<ChunkCount>()
}

/// The table in shared memory (shmem.rs).
pub const GRANTS_PART: Part = Part { request, place };

fn request() {
    unsafe { pg_sys::RequestAddinShmemSpace(table_size(settings::max_grants())) };
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
            (*table).claimed = AtomicU32::new(0);
            let slots = (*table).slots.as_mut_ptr();
            for index in 0..capacity as usize {
                slots.add(index).write(Slot {
                    claimed_by: AtomicU32::new(0),
                    changes: AtomicU32::new(0),
                    published: Published {
                        database: pg_sys::InvalidOid,
                        ns: 0,
                        id: 0,
                        token: 0,
                        acquired_at: 0,
                        permit: 0,
                        session: false,
                        live: false,
                        shared: false,
                        label: ShortText::EMPTY,
                        owner: ShortText::EMPTY,
                        spare: [0; 5],
                    }
                    .into_words()
                    .map(AtomicU64::new),
                });
            }
            let chunks = (*table).chunks_start();
            for index in 0..chunk_count(capacity) {
                chunks.add(index).write(ChunkCount(AtomicU32::new(0)));
            }
        }
        TABLE = table;
    }
}

fn available() -> bool {
    unsafe { !TABLE.is_null() }
}

/// The table in shared memory; None when there is no table.
fn table() -> Option<&'static Table> {
    available().then(|| unsafe { &*TABLE })
}

impl Table {
    fn slots(&self) -> &[Slot] {
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.capacity as usize) }
    }

    /// Where the chunk counts start: the first cache line after the slots (table_size has
    /// room for the alignment).
    fn chunks_start(&self) -> *mut ChunkCount {
        let after_slots = unsafe { self.slots.as_ptr().add(self.capacity as usize) } as *mut u8;
        let skip = after_slots.align_offset(std::mem::align_of::<ChunkCount>());
        unsafe { after_slots.add(skip) as *mut ChunkCount }
    }

    /// Each chunk's count of claimed slots (after the slots).
    fn chunks(&self) -> &[ChunkCount] {
        unsafe { std::slice::from_raw_parts(self.chunks_start(), chunk_count(self.capacity)) }
    }

    /// The slots of chunks with a slot claimed (a chunk claimed once the scan passes it is
    /// read as it was: without that grant, published a moment later).
    fn claimed_slots(&self) -> impl Iterator<Item = &Slot> {
        (self.chunks().iter().zip(self.slots().chunks(CHUNK)))
            .filter(|(count, _)| count.0.load(Ordering::Acquire) > 0)
            .flat_map(|(_, slots)| slots)
    }
}

/// Publishes grants of this backend, all granted with `token` at `acquired_at`, and tells
/// `published` where each is: its slot, or None (no table, or the table is full). The table's
/// count of claimed slots is taken once for all of them (one atomic addition on the line
/// every backend writes, not one a grant).
pub fn publish<'a>(
    grants: &[NewGrant<'a>],
    token: i64,
    acquired_at: pg_sys::TimestampTz,
    mut published: impl FnMut(&NewGrant<'a>, Option<u32>),
) {
    let Some(table) = table() else {
        grants.iter().for_each(|grant| published(grant, None));
        return;
    };
    let (claimed, slots) = (&table.claimed, table.slots());
    let capacity = slots.len();
    let wanted = grants.len() as u32;
    let before = claimed.fetch_add(wanted, Ordering::Relaxed);
    let over = (before + wanted)
        .saturating_sub(capacity as u32)
        .min(wanted);
    let mut reserved = wanted - over;
    if over > 0 {
        claimed.fetch_sub(over, Ordering::Relaxed);
    }
    let (pid, database) = unsafe { (pg_sys::MyProcPid, pg_sys::MyDatabaseId) };
    for grant in grants {
        let slot = (reserved > 0).then(|| claim_slot(table, pid)).flatten();
        if let Some(index) = slot {
            reserved -= 1;
            slots[index as usize].publish(Published {
                database,
                ns: grant.lock.key.ns,
                id: grant.lock.key.id,
                token,
                acquired_at,
                permit: grant.lock.permit,
                session: grant.scope == Scope::Session,
                live: true,
                shared: grant.mode == Mode::Shared,
                label: ShortText::new(grant.label),
                owner: ShortText::new(grant.owner),
                spare: [0; 5],
            });
        }
        published(grant, slot);
    }
    if reserved > 0 {
        claimed.fetch_sub(reserved, Ordering::Relaxed);
    }
}

/// Claims a free slot for backend `pid` (one the table's count has room for) and counts it in
/// its chunk; None if none was found.
fn claim_slot(table: &Table, pid: i32) -> Option<u32> {
    let slots = table.slots();
    let capacity = slots.len();
    let first = FIRST_LOOK.get().unwrap_or(pid as u32) as usize % capacity;
    // A slot freed behind the search while others took those ahead of it can take a second
    // pass to find.
    let index = std::iter::repeat_n((first..capacity).chain(0..first), 2)
        .flatten()
        .find(|&index| {
            let claimed_by = &slots[index].claimed_by;
            claimed_by.load(Ordering::Relaxed) == 0
                && (claimed_by.compare_exchange(
                    0,
                    pid as u32,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ))
                .is_ok()
        })?;
    // Counted before the grant is written, so that readers see every grant written whole.
    table.chunks()[index / CHUNK]
        .0
        .fetch_add(1, Ordering::AcqRel);
    FIRST_LOOK.set(Some(index as u32 + 1));
    Some(index as u32)
}

/// Removes grants this backend published. The counts are taken down once for each run of
/// slots in one chunk and once for the table (after the slots are free: a reader may read a
/// chunk a moment longer than it needs to, never skip a claimed slot).
pub fn withdraw(indexes: impl IntoIterator<Item = u32>) {
    let Some(table) = table() else {
        return;
    };
    let (slots, chunks) = (table.slots(), table.chunks());
    let pid = unsafe { pg_sys::MyProcPid } as u32;
    let (mut withdrawn, mut lowest) = (0, u32::MAX);
    // The chunk of the slots freed last and how many there were.
    let mut run: Option<(usize, u32)> = None;
    let end_run = |run: Option<(usize, u32)>| {
        if let Some((chunk, count)) = run {
            chunks[chunk].0.fetch_sub(count, Ordering::Release);
        }
    };
    for index in indexes {
        let slot = &slots[index as usize];
        // Only this backend's own slot: never free another backend's grant.
        if slot.claimed_by.load(Ordering::Relaxed) == pid {
            slot.withdraw();
            slot.claimed_by.store(0, Ordering::Release);
            let chunk = index as usize / CHUNK;
            run = match run {
                Some((same, count)) if same == chunk => Some((chunk, count + 1)),
                other => {
                    end_run(other);
                    Some((chunk, 1))
                }
            };
            (withdrawn, lowest) = (withdrawn + 1, lowest.min(index));
        }
    }
    end_run(run);
    if withdrawn > 0 {
        table.claimed.fetch_sub(withdrawn, Ordering::Relaxed);
        FIRST_LOOK.set(Some(
            FIRST_LOOK.get().map_or(lowest, |first| first.min(lowest)),
        ));
    }
}

/// A live grant as the table holds it.
pub struct Grant {
    pub pid: i32,
    pub lock: Lockable,
    pub mode: Mode,
    pub token: i64,
    pub scope: Scope,
    pub acquired_at: TimestampWithTimeZone,
    /// The text of a named key (its first 64 bytes).
    pub label: Option<String>,
    /// The owner of a session grant (its first 64 bytes).
    pub owner: Option<String>,
}

impl Grant {
    fn of(pid: i32, slot: &Published) -> Grant {
        Grant {
            label: slot.label.get(),
            owner: slot.owner.get(),
            ..IndexedGrant::of(slot, None).grant(pid, slot.lockable())
        }
    }
}

impl Published {
    fn lockable(&self) -> Lockable {
        Lockable {
            key: LockKey {
                ns: self.ns,
                id: self.id,
            },
            permit: self.permit,
        }
    }
}

/// The live fenced grants of the current database, copied out in one pass over the table;
/// empty when there is no table.
pub fn live_grants() -> Vec<Grant> {
    let database = unsafe { pg_sys::MyDatabaseId };
    let Some(table) = table() else {
        return Vec::new();
    };
    let live: Vec<(i32, Published)> = (table.claimed_slots())
        .filter_map(Slot::read)
        .filter(|(_, published)| published.database == database)
        .collect();
    live.iter()
        .map(|(pid, slot)| Grant::of(*pid, slot))
        .collect()
}

/// What a GrantIndex keeps of a grant: all but its texts, which only a grant with a text
/// reads again from its slot.
struct IndexedGrant {
    token: i64,
    acquired_at: pg_sys::TimestampTz,
    shared: bool,
    session: bool,
    /// The slot, when the grant has a key's text or an owner.
    texts: Option<&'static Slot>,
}

impl IndexedGrant {
    /// The grant `published` in `slot`, which is kept when the grant has a text.
    fn of(published: &Published, slot: Option<&'static Slot>) -> IndexedGrant {
        IndexedGrant {
            token: published.token,
            acquired_at: published.acquired_at,
            shared: published.shared,
            session: published.session,
            texts: slot.filter(|_| published.label.len > 0 || published.owner.len > 0),
        }
    }

    fn scope(&self) -> Scope {
        match self.session {
            true => Scope::Session,
            false => Scope::Transaction,
        }
    }

    /// The grant without its texts.
    fn grant(&self, pid: i32, lock: Lockable) -> Grant {
        Grant {
            pid,
            lock,
            mode: match self.shared {
                true => Mode::Shared,
                false => Mode::Exclusive,
            },
            token: self.token,
            scope: self.scope(),
            acquired_at: unsafe {
                TimestampWithTimeZone::from_datum(pg_sys::Datum::from(self.acquired_at), false)
            }
            .expect("a timestamp"),
            label: None,
            owner: None,
        }
    }
}

/// The live grants of the current database by backend and lock, from one pass over the
/// table: a reader of many grants (the fenced_locks view) looks each up in a map of a few
/// dozen bytes a grant (its texts left in its slot), not in a copy of every slot.
pub struct GrantIndex {
    grants: FxHashMap<(i32, Lockable), IndexedGrant>,
}

impl GrantIndex {
    /// The grants `wanted(pid, scope)` picks; empty when there is no table.
    pub fn new(wanted: impl Fn(i32, Scope) -> bool) -> GrantIndex {
        let database = unsafe { pg_sys::MyDatabaseId };
        let grants = table().map_or_else(FxHashMap::default, |table| {
            let mut grants = FxHashMap::with_capacity_and_hasher(
                table.claimed.load(Ordering::Relaxed) as usize,
                Default::default(),
            );
            for slot in table.claimed_slots() {
                let Some((pid, published)) = slot.read() else {
                    continue;
                };
                let indexed = IndexedGrant::of(&published, Some(slot));
                if published.database == database && wanted(pid, indexed.scope()) {
                    grants.insert((pid, published.lockable()), indexed);
                }
            }
            grants
        });
        GrantIndex { grants }
    }

    /// Backend `pid`'s grant of `lock`, once; None if there is none, or if it has a text and
    /// its slot no longer holds it (withdrawn since, as the lock will be a moment later).
    pub fn take(&mut self, pid: i32, lock: Lockable) -> Option<Grant> {
        let indexed = self.grants.remove(&(pid, lock))?;
        let grant = indexed.grant(pid, lock);
        let Some(slot) = indexed.texts else {
            return Some(grant);
        };
        let (read_pid, published) = slot.read()?;
        (read_pid == pid && published.lockable() == lock && published.token == grant.token).then(
            || Grant {
                label: published.label.get(),
                owner: published.owner.get(),
                ..grant
            },
        )
    }
}

/// The live fenced grants of the current database as (pid, ns, id, token, scope,
/// acquired_at, key, owner): `key` is the text of a named key, NULL for an (ns, id) key;
/// `owner` the owner a session grant was taken for (each their first 64 bytes).
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted, schema = "fenced_lock_internal")]
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
            grant.lock.key.ns,
            grant.lock.key.id,
            grant.token,
            grant.scope.name(),
            grant.acquired_at,
            grant.label,
            grant.owner,
        )
    }))
}

/// Whether this server keeps the grants table (fenced_lock is preloaded).
#[pg_extern(stable, parallel_safe, schema = "fenced_lock_internal")]
fn fenced_lock_grants_available() -> bool {
    available()
}
