//! The resource side of fencing: checking tokens where the data lives.
//!
//! - `update`: fenced_update, a conditional UPDATE that refuses stale tokens;
//! - `target`: fenced_update's target given by name, resolved once per backend;
//! - `trigger`: enforce_fence, a trigger that refuses any UPDATE lowering a fence column;
//! - `ledger`: fence_check / fence_check_or_false, the highest token per named resource.

mod ledger;
mod target;
mod trigger;
mod update;

use crate::errors::FencedError;
use pgrx::pg_sys;

/// The callbacks that tell fenced_update's caches about changed tables and names.
pub fn register_invalidation_callbacks() {
    update::register_invalidation_callback();
    target::register_invalidation_callbacks();
}

/// A column of the target table, found by name.
struct Column {
    attnum: i16,
    type_oid: pg_sys::Oid,
    typmod: i32,
}

/// `schema.table`, quoted as needed: how messages name a relation.
unsafe fn relation_display_name(relation: pg_sys::Relation) -> String {
    unsafe {
        let class = (*relation).rd_rel;
        let schema = pg_sys::get_namespace_name((*class).relnamespace);
        let name = pg_sys::quote_qualified_identifier(schema, (*class).relname.data.as_ptr());
        std::ffi::CStr::from_ptr(name)
            .to_string_lossy()
            .into_owned()
    }
}

/// The live (not dropped) column `name` of `relation`, or 42703.
unsafe fn find_column(relation: pg_sys::Relation, name: &str) -> Column {
    unsafe {
        crate::compat::attributes((*relation).rd_att)
            .iter()
            .find(|att| !att.attisdropped && name_of(att) == name)
            .map(|att| Column {
                attnum: att.attnum,
                type_oid: att.atttypid,
                typmod: att.atttypmod,
            })
            .unwrap_or_else(|| {
                FencedError::UndefinedColumn {
                    table: relation_display_name(relation),
                    column: name.to_string(),
                }
                .raise()
            })
    }
}

fn name_of(attribute: &pg_sys::FormData_pg_attribute) -> &str {
    unsafe { std::ffi::CStr::from_ptr(attribute.attname.data.as_ptr()) }
        .to_str()
        .unwrap_or("")
}

/// The fence column `name` of `relation`: it must exist and be a bigint, as tokens are
/// (42703, 42804).
unsafe fn find_fence_column(relation: pg_sys::Relation, name: &str) -> Column {
    let column = unsafe { find_column(relation, name) };
    if column.type_oid != pg_sys::INT8OID {
        FencedError::FenceColumnNotBigint {
            table: unsafe { relation_display_name(relation) },
            column: name.to_string(),
            quoted_column: crate::errors::quote_identifier(name),
            type_name: unsafe {
                std::ffi::CStr::from_ptr(pg_sys::format_type_be(column.type_oid))
                    .to_string_lossy()
                    .into_owned()
            },
        }
        .raise();
    }
    column
}

/// A new memory context for a few small allocations, named `name`, under `parent`.
fn small_memory_context(
    parent: pg_sys::MemoryContext,
    name: &'static std::ffi::CStr,
) -> pg_sys::MemoryContext {
    unsafe {
        pg_sys::AllocSetContextCreateExtended(
            parent,
            name.as_ptr(),
            pg_sys::ALLOCSET_SMALL_MINSIZE as _,
            pg_sys::ALLOCSET_SMALL_INITSIZE as _,
            pg_sys::ALLOCSET_SMALL_MAXSIZE as _,
        )
    }
}

/// A text datum's bytes, valid as long as the datum (PostgreSQL reads a plain value, short
/// header included, in place; only a compressed or external one is detoasted, into the
/// current memory context).
///
/// # Safety
/// `datum` must be a text (or other varlena).
unsafe fn text_bytes<'a>(datum: pg_sys::Datum) -> &'a [u8] {
    unsafe {
        pgrx::varlena::varlena_to_byte_slice(pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr()))
    }
}

// Each C symbol keeps the meaning it had in the SQL of released versions, which a database
// not yet updated (or pg_upgrade) still binds to: `fenced_update` and `fence_check_wrapper`
// return false when stale (1.0's `_or_false` forms), `fenced_update_strict` and
// `fence_check_strict` raise SF001 (1.0's plain names).
crate::errors::raw_error_entry!(enforce_fence, pg_finfo_enforce_fence, trigger::fire);
crate::errors::raw_error_entry!(
    fence_check_strict,
    pg_finfo_fence_check_strict,
    ledger::check
);
crate::errors::raw_error_entry!(
    fence_check_wrapper,
    pg_finfo_fence_check_wrapper,
    ledger::check_or_false
);
crate::errors::raw_error_entry!(
    fenced_update_strict,
    pg_finfo_fenced_update_strict,
    update::fenced_update
);
crate::errors::raw_error_entry!(
    fenced_update,
    pg_finfo_fenced_update,
    update::fenced_update_or_false
);
// 0.1.0's symbol for fenced_update (pgrx's wrapper).
crate::errors::raw_error_entry!(
    fenced_update_wrapper,
    pg_finfo_fenced_update_wrapper,
    update::fenced_update_or_false
);
