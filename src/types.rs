//! The small types every other module shares: the lock key, the scope of a grant, and the
//! check that a required argument was given. A leaf: it imports nothing from this crate, so
//! `errors`, `grants`, `namespaces` and `locking` can all depend on it without a cycle.

use pgrx::pg_sys;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// A namespaced advisory lock key: `ns` is the kind of lock, `id` the entity.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct LockKey {
    pub ns: i32,
    pub id: i32,
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.ns, self.id)
    }
}

impl LockKey {
    /// The tag of the two-int4 advisory lock form (objsubid 2 in pg_locks), the one
    /// `pg_advisory_xact_lock(int4, int4)` builds.
    pub fn locktag(self) -> pg_sys::LOCKTAG {
        pg_sys::LOCKTAG {
            locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
            locktag_field2: self.ns as u32,
            locktag_field3: self.id as u32,
            locktag_field4: 2,
            locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        }
    }
}

/// The most permits a key's semaphore has: its slots are numbered 1..=MAX_PERMITS (a waiting
/// acquire tries each slot in turn, so the bound keeps a look short).
pub const MAX_PERMITS: i32 = 4096;

/// The `objsubid` of a key's permit queue: waiting permit acquires line up on it, in arrival
/// order, above every slot number.
const PERMIT_QUEUE: u16 = u16::MAX;

/// The `objsubid` of the line of a key's waiting lease permit acquires (below the permit queue,
/// above every lease permit's first-lease lock).
const LEASE_PERMIT_LINE: u16 = u16::MAX - 1;

/// The mode of a grant on a key's advisory lock: `pg_advisory_xact_lock`'s (exclusive) or
/// `pg_advisory_xact_lock_shared`'s (shared, many holders at once).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Mode {
    Exclusive,
    Shared,
}

impl Mode {
    pub fn lockmode(self) -> pg_sys::LOCKMODE {
        match self {
            Mode::Exclusive => pg_sys::ExclusiveLock as _,
            Mode::Shared => pg_sys::ShareLock as _,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// What one grant is on: a key's advisory lock (`permit` 0) or one of its permits (slots
/// 1..=MAX_PERMITS), which are separate locks: permits of (ns, id) neither exclude nor are
/// excluded by the lock on (ns, id).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Lockable {
    pub key: LockKey,
    pub permit: u16,
}

impl Lockable {
    pub fn advisory(key: LockKey) -> Lockable {
        Lockable { key, permit: 0 }
    }

    pub fn locktag(self) -> pg_sys::LOCKTAG {
        match self.permit {
            0 => self.key.locktag(),
            slot => self.key.permit_tag(slot),
        }
    }
}

impl LockKey {
    /// The tag of permit `slot` of the key: a user lock (ns, id, slot) of this database.
    /// pg_locks shows it as locktype 'userlock', classid ns, objid id, objsubid slot; the
    /// session sentinel (locking.rs), the only other user lock, has objsubid 0.
    pub fn permit_tag(self, slot: u16) -> pg_sys::LOCKTAG {
        pg_sys::LOCKTAG {
            locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
            locktag_field2: self.ns as u32,
            locktag_field3: self.id as u32,
            locktag_field4: slot,
            locktag_type: pg_sys::LockTagType::LOCKTAG_USERLOCK as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        }
    }

    /// The tag waiting permit acquires of the key line up on.
    pub fn permit_queue_tag(self) -> pg_sys::LOCKTAG {
        self.permit_tag(PERMIT_QUEUE)
    }

    /// The tag waiting lease acquires of the key line up on: for its lease, an advisory lock
    /// of its own (objsubid 4 in pg_locks; 3 is the first-lease lock); for its lease permits,
    /// a user lock.
    pub fn lease_line_tag(self, permits: bool) -> pg_sys::LOCKTAG {
        match permits {
            false => pg_sys::LOCKTAG {
                locktag_field4: 4,
                ..self.locktag()
            },
            true => self.permit_tag(LEASE_PERMIT_LINE),
        }
    }
}

/// What a new grant is: the lock, its mode and scope, the text of a named key (for
/// fenced_locks), and whom a session grant was taken for.
pub struct NewGrant<'a> {
    pub lock: Lockable,
    pub mode: Mode,
    pub scope: Scope,
    pub label: Option<&'a str>,
    pub owner: Option<&'a str>,
}

/// What a user lock tag of this database is to fenced_lock: a permit slot or a permit queue
/// (None: the session sentinel, or not a user lock).
pub enum PermitTag {
    Slot(LockKey, u16),
    Queue(LockKey),
}

impl PermitTag {
    pub fn of(tag: &pg_sys::LOCKTAG) -> Option<PermitTag> {
        if tag.locktag_type != pg_sys::LockTagType::LOCKTAG_USERLOCK as u8 {
            return None;
        }
        let key = LockKey {
            ns: tag.locktag_field2 as i32,
            id: tag.locktag_field3 as i32,
        };
        match tag.locktag_field4 {
            PERMIT_QUEUE => Some(PermitTag::Queue(key)),
            slot if (1..=MAX_PERMITS as u16).contains(&slot) => Some(PermitTag::Slot(key, slot)),
            // 0: the session sentinel; above MAX_PERMITS: a lease permit's first-lease lock, or
            // the line of the key's waiting lease permit acquires.
            _ => None,
        }
    }
}

/// A map by lock key with a hash of one multiply per field, not SipHash: it is on the
/// acquire path, and a backend's map holds only its own grants, so colliding keys would slow
/// only the backend that chose them.
pub type KeyMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<KeyHasher>>;

#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&byte| self.write_u32(byte.into()));
    }

    fn write_u32(&mut self, value: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(value)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_i32(&mut self, value: i32) {
        self.write_u32(value as u32);
    }

    fn write_u16(&mut self, value: u16) {
        self.write_u32(value.into());
    }
}

/// How long a fenced lock lasts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scope {
    Transaction,
    Session,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Transaction => "transaction",
            Scope::Session => "session",
        }
    }
}

/// A required argument that was NULL: `errors` turns it into SQLSTATE 22004.
pub struct NullArgument {
    pub function: &'static str,
    pub argument: &'static str,
}

/// `value`, or the NullArgument that names it.
pub fn required<T>(
    value: Option<T>,
    function: &'static str,
    argument: &'static str,
) -> Result<T, NullArgument> {
    value.ok_or(NullArgument { function, argument })
}

/// The highest token advance_fencing_tokens moves past: 2^62 leaves as many again to draw
/// (146,000 years at a million a second), so no advance brings the sequence near its end.
pub const MAX_ADVANCE: i64 = 1 << 62;
