//! The small types every other module shares: the lock key, the scope of a grant, and the
//! check that a required argument was given. A leaf: it imports nothing from this crate, so
//! `errors`, `grants`, `namespaces` and `locking` can all depend on it without a cycle.

use pgrx::pg_sys;
use std::fmt;

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
