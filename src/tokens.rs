//! Fencing tokens: drawn from the extension's own sequence (CACHE 1, NO CYCLE), found in the
//! schema of the calling function rather than through search_path, and called without SPI.

use crate::errors::FencedError;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

const SEQUENCE_NAME: &core::ffi::CStr = c"fencing_token_seq";

thread_local! {
    /// The sequence's OID, resolved on first use; reset when the relcache says it changed
    /// (for example DROP EXTENSION followed by CREATE EXTENSION in the same session).
    static SEQUENCE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

unsafe extern "C-unwind" {
    // Exported by PostgreSQL (commands/sequence.h) but not bound by pgrx. Skipping the
    // permission check lets every role draw tokens while no role but the owner may touch
    // the sequence itself.
    fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
}

/// Draws the next token. `fcinfo` is the calling SQL function's, whose schema is the
/// extension's schema.
pub fn next_token(fcinfo: pg_sys::FunctionCallInfo) -> i64 {
    let sequence = sequence_oid(fcinfo);
    // The guard turns an ERROR raised inside (sequence exhausted, read-only transaction)
    // into an orderly unwind through Rust.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| nextval_internal(sequence, false)) }
}

fn sequence_oid(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Oid {
    let cached = SEQUENCE.get();
    if cached != pg_sys::InvalidOid {
        return cached;
    }
    let resolved = unsafe {
        let function = (*(*fcinfo).flinfo).fn_oid;
        let schema = pg_sys::get_func_namespace(function);
        pg_sys::get_relname_relid(SEQUENCE_NAME.as_ptr(), schema)
    };
    if resolved == pg_sys::InvalidOid {
        FencedError::TokenSequenceMissing.raise();
    }
    SEQUENCE.set(resolved);
    resolved
}

pub fn register_invalidation_callback() {
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), 0.into()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    // InvalidOid means "every relation" (a cache reset).
    if relid == pg_sys::InvalidOid || relid == SEQUENCE.get() {
        SEQUENCE.set(pg_sys::InvalidOid);
    }
}
