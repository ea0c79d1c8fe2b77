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

/// A map by lock key with a hash of one multiply per field, not SipHash: it is on the
/// acquire path, and a backend's map holds only its own grants, so colliding keys would slow
/// only the backend that chose them.
pub type KeyMap<V> = std::collections::HashMap<LockKey, V, BuildHasherDefault<KeyHasher>>;

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
