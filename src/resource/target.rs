//! fenced_update's target given as a table name (text: what an untyped driver parameter
//! becomes), resolved as regclass input resolves it, through search_path, and locked as a
//! statement naming the table locks it.
//!
//! A backend remembers the names it resolved, so a repeated call neither parses nor looks its
//! name up again, until anything could make the name resolve differently: a change to
//! pg_class or pg_namespace (a table created, renamed or dropped, a schema created or renamed,
//! in this session or committed by another, seen when PostgreSQL accepts invalidations, as its
//! own lookups see them), or another active search path (a new search_path, role or temporary
//! schema). This is the plan cache's own test for a saved statement's names.

use crate::compat;
use pgrx::pg_guard;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

/// More names than this and the remembered ones are forgotten at once: an application names
/// a handful of tables, and the map must not grow with generated names.
const MAX_NAMES: usize = 64;

struct ResolvedNames {
    /// The search path the names were resolved under, in `memory`; null before the first.
    search_path: *mut compat::SearchPathMatcher,
    memory: pg_sys::MemoryContext,
    names: HashMap<Vec<u8>, pg_sys::Oid>,
    /// Counts invalidations: a name resolved while one arrived is not remembered.
    generation: u64,
}

thread_local! {
    static RESOLVED: RefCell<ResolvedNames> = RefCell::new(ResolvedNames {
        search_path: std::ptr::null_mut(),
        memory: std::ptr::null_mut(),
        names: HashMap::new(),
        generation: 0,
    });
}

pub fn register_invalidation_callbacks() {
    for cache in [
        pg_sys::SysCacheIdentifier::RELNAMENSP,
        pg_sys::SysCacheIdentifier::NAMESPACEOID,
    ] {
        unsafe { pg_sys::CacheRegisterSyscacheCallback(cache as _, Some(forget_names), 0.into()) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_names(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    RESOLVED.with_borrow_mut(forget);
}

fn forget(resolved: &mut ResolvedNames) {
    resolved.names.clear();
    resolved.generation += 1;
}

/// The table `name` (a text datum) names, locked in `mode`, as a statement naming it would
/// find and lock it (42P01 if none), once `check` (which may raise an error) has seen it
/// before the lock: when taking the lock processed invalidations (the name may now mean
/// another table, or none), the lock is let go and the name resolved again.
pub fn lock_table_named(
    name: pg_sys::Datum,
    mode: pg_sys::LOCKMODE,
    check: fn(pg_sys::Oid),
) -> pg_sys::Oid {
    loop {
        let oid = table_oid(name);
        check(oid);
        let generation = RESOLVED.with_borrow(|resolved| resolved.generation);
        unsafe { pg_sys::LockRelationOid(oid, mode) };
        if RESOLVED.with_borrow(|resolved| resolved.generation) == generation {
            return oid;
        }
        unsafe { pg_sys::UnlockRelationOid(oid, mode) };
    }
}

/// The table `name` (a text datum) names, as `name::regclass` would find it (42P01 if none).
/// No borrow of RESOLVED is held across PostgreSQL calls: they may accept invalidations.
fn table_oid(name: pg_sys::Datum) -> pg_sys::Oid {
    let bytes = unsafe { super::text_bytes(name) };
    let search_path = RESOLVED.with_borrow(|resolved| resolved.search_path);
    if search_path.is_null() || !unsafe { compat::search_path_is_current(search_path) } {
        remember_search_path();
    }
    if let Some(oid) = RESOLVED.with_borrow(|resolved| resolved.names.get(bytes).copied()) {
        return oid;
    }
    let generation = RESOLVED.with_borrow(|resolved| resolved.generation);
    let oid = unsafe {
        pg_sys::Oid::from(
            pg_sys::OidInputFunctionCall(
                pg_sys::Oid::from(pg_sys::F_REGCLASSIN),
                pg_sys::pnstrdup(bytes.as_ptr().cast(), bytes.len()),
                pg_sys::InvalidOid,
                -1,
            )
            .value() as u32,
        )
    };
    RESOLVED.with_borrow_mut(|resolved| {
        if resolved.generation == generation {
            if resolved.names.len() >= MAX_NAMES {
                resolved.names.clear();
            }
            resolved.names.insert(bytes.to_vec(), oid);
        }
    });
    oid
}

/// Forgets the names resolved under another search path and keeps the current one.
fn remember_search_path() {
    // Made under the current context and kept only once complete, as the plan cache does:
    // an error on the way leaves nothing behind.
    let memory = super::small_memory_context(
        unsafe { pg_sys::CurrentMemoryContext },
        c"fenced_update target names",
    );
    let search_path = compat::current_search_path(memory);
    unsafe { pg_sys::MemoryContextSetParent(memory, pg_sys::TopMemoryContext) };
    let previous = RESOLVED.with_borrow_mut(|resolved| {
        forget(resolved);
        resolved.search_path = search_path;
        std::mem::replace(&mut resolved.memory, memory)
    });
    if !previous.is_null() {
        unsafe { pg_sys::MemoryContextDelete(previous) };
    }
}
