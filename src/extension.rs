//! The extension's own objects, found in the schema of the calling fenced_lock function (never
//! through search_path), resolved once per backend and forgotten when the relcache says one of
//! them changed (for example DROP EXTENSION then CREATE EXTENSION in the same session).

use crate::errors::FencedError;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ffi::CStr;

const TOKEN_SEQUENCE: &CStr = c"fencing_token_seq";
const NAMESPACES_TABLE: &CStr = c"fenced_namespaces";
const NAMESPACES_NAME_INDEX: &CStr = c"fenced_namespaces_name_key";
/// `fenced_namespaces.name`, the column its name index covers.
pub const NAMESPACES_NAME_COLUMN: i16 = 2;

#[derive(Clone, Copy)]
pub struct Objects {
    pub token_sequence: pg_sys::Oid,
    pub namespaces_table: pg_sys::Oid,
    pub namespaces_name_index: pg_sys::Oid,
    /// The collation of `fenced_namespaces.name` (the database's default unless changed):
    /// a scan of its index must compare names as the index orders them.
    pub namespaces_name_collation: pg_sys::Oid,
}

thread_local! {
    static OBJECTS: Cell<Option<Objects>> = const { Cell::new(None) };
}

/// The schema of the calling function, which is the extension's schema.
fn schema(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Oid {
    unsafe { pg_sys::get_func_namespace((*(*fcinfo).flinfo).fn_oid) }
}

/// The OID of the extension's relation `name`, looked up by name (a syscache probe; not
/// cached); `fcinfo` is the calling SQL function's.
pub fn relation(fcinfo: pg_sys::FunctionCallInfo, name: &CStr) -> pg_sys::Oid {
    let relid = unsafe { pg_sys::get_relname_relid(name.as_ptr(), schema(fcinfo)) };
    if relid == pg_sys::InvalidOid {
        FencedError::ExtensionObjectMissing {
            name: name.to_string_lossy().into_owned(),
        }
        .raise();
    }
    relid
}

/// The extension's objects; `fcinfo` is the calling SQL function's.
pub fn objects(fcinfo: pg_sys::FunctionCallInfo) -> Objects {
    if let Some(cached) = OBJECTS.get() {
        return cached;
    }
    let find = |name: &CStr| relation(fcinfo, name);
    let token_sequence = find(TOKEN_SEQUENCE);
    // An UNLOGGED sequence is reset by crash recovery: tokens would start over. ALTER
    // SEQUENCE ... SET UNLOGGED changes its relcache entry, so this is checked again then.
    if unsafe { pg_sys::get_rel_persistence(token_sequence) } as u8
        != pg_sys::RELPERSISTENCE_PERMANENT
    {
        FencedError::UnloggedTokenSequence.raise();
    }
    let namespaces_table = find(NAMESPACES_TABLE);
    let resolved = Objects {
        token_sequence,
        namespaces_table,
        namespaces_name_index: find(NAMESPACES_NAME_INDEX),
        namespaces_name_collation: column_collation(namespaces_table, NAMESPACES_NAME_COLUMN),
    };
    OBJECTS.set(Some(resolved));
    resolved
}

fn column_collation(table: pg_sys::Oid, attnum: i16) -> pg_sys::Oid {
    let (mut type_oid, mut typmod, mut collation) = (pg_sys::InvalidOid, 0, pg_sys::InvalidOid);
    unsafe {
        pg_sys::get_atttypetypmodcoll(table, attnum, &mut type_oid, &mut typmod, &mut collation)
    };
    collation
}

/// `schema.name` for an object of the extension, quoted, for SQL that fenced_lock's own
/// functions run.
pub fn qualified(fcinfo: pg_sys::FunctionCallInfo, name: &CStr) -> String {
    unsafe {
        let schema = pg_sys::get_namespace_name(schema(fcinfo));
        let name = pg_sys::quote_qualified_identifier(schema, name.as_ptr());
        CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

pub fn register_invalidation_callback() {
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), 0.into()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    if let Some(objects) = OBJECTS.get() {
        // InvalidOid means "every relation" (a cache reset).
        let ours = [
            objects.token_sequence,
            objects.namespaces_table,
            objects.namespaces_name_index,
        ];
        if relid == pg_sys::InvalidOid || ours.contains(&relid) {
            OBJECTS.set(None);
        }
    }
}

/// Runs `work` with the owner of `relation` as the current user (as a SECURITY DEFINER function
/// owned by it runs), then restores the caller; `work` gets the caller's role. An ERROR in
/// between is cleaned up by the (sub)transaction's abort, which restores the user, as it does
/// for such functions.
pub fn as_owner_of<R>(relation: pg_sys::Oid, work: impl FnOnce(pg_sys::Oid) -> R) -> R {
    let owner = {
        let relation =
            unsafe { pgrx::PgRelation::with_lock(relation, pg_sys::AccessShareLock as _) };
        unsafe { (*relation.rd_rel).relowner }
    };
    unsafe {
        let (mut caller, mut context) = (pg_sys::InvalidOid, 0);
        pg_sys::GetUserIdAndSecContext(&mut caller, &mut context);
        pg_sys::SetUserIdAndSecContext(
            owner,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let result = work(caller);
        pg_sys::SetUserIdAndSecContext(caller, context);
        result
    }
}
