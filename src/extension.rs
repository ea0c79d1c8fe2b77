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

#[derive(Clone, Copy)]
pub struct Objects {
    pub token_sequence: pg_sys::Oid,
    pub namespaces_table: pg_sys::Oid,
    pub namespaces_name_index: pg_sys::Oid,
}

thread_local! {
    static OBJECTS: Cell<Option<Objects>> = const { Cell::new(None) };
}

/// The schema of the calling function, which is the extension's schema.
fn schema(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Oid {
    unsafe { pg_sys::get_func_namespace((*(*fcinfo).flinfo).fn_oid) }
}

/// The extension's objects; `fcinfo` is the calling SQL function's.
pub fn objects(fcinfo: pg_sys::FunctionCallInfo) -> Objects {
    if let Some(cached) = OBJECTS.get() {
        return cached;
    }
    let schema = schema(fcinfo);
    let find = |name: &CStr| {
        let relid = unsafe { pg_sys::get_relname_relid(name.as_ptr(), schema) };
        if relid == pg_sys::InvalidOid {
            FencedError::ExtensionObjectMissing {
                name: name.to_string_lossy().into_owned(),
            }
            .raise();
        }
        relid
    };
    let resolved = Objects {
        token_sequence: find(TOKEN_SEQUENCE),
        namespaces_table: find(NAMESPACES_TABLE),
        namespaces_name_index: find(NAMESPACES_NAME_INDEX),
    };
    OBJECTS.set(Some(resolved));
    resolved
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
