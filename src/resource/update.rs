//! fenced_update(target, id, token, changes, key_column, fence_column): in one statement,
//! `UPDATE target SET <changes>, <fence> = token WHERE <key> = id AND (<fence> <= token OR
//! <fence> IS NULL)`. Equal tokens pass on purpose: a token belongs to one grant, so an equal
//! token is the same holder writing again; a NULL fence means no token was accepted yet. Runs
//! with the caller's rights (column privileges and row-level security apply); identifiers are
//! quoted, values are always parameters.
//!
//! A bare C function (`raw_error_entry!`), so that an error raised by the UPDATE (SF001 from
//! an enforce_fence trigger, a domain's custom code) reaches the caller with its own SQLSTATE.

use super::{
    find_column, find_fence_column, relation_display_name, small_memory_context, target,
    text_bytes, Column,
};
use crate::errors::{original_sqlstate, FencedError, OrRaise, RawError, StaleToken};
use crate::spi::{self, SavedPlan};
use crate::stats::{self, Checker};
use crate::types;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::CStr;
use std::rc::Rc;

const FUNCTION: &str = "fenced_update";

/// What a saved UPDATE depends on, besides the table's definition (which the plan cache
/// tracks): the statement text is built from these.
struct StatementKey {
    table: pg_sys::Oid,
    key_type: pg_sys::Oid,
    key_column: String,
    fence_column: String,
    changed_columns: Vec<String>,
}

/// A call's StatementKey, borrowed from its arguments: found in the cache without copying.
struct CallKey<'a> {
    table: pg_sys::Oid,
    key_type: pg_sys::Oid,
    key_column: &'a [u8],
    fence_column: &'a [u8],
    changes: &'a [(&'a [u8], JsonValue<'a>)],
}

impl StatementKey {
    fn of(call: &CallKey) -> StatementKey {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        StatementKey {
            table: call.table,
            key_type: call.key_type,
            key_column: text(call.key_column),
            fence_column: text(call.fence_column),
            changed_columns: call.changes.iter().map(|(name, _)| text(name)).collect(),
        }
    }

    fn matches(&self, call: &CallKey) -> bool {
        self.table == call.table
            && self.key_type == call.key_type
            && self.key_column.as_bytes() == call.key_column
            && self.fence_column.as_bytes() == call.fence_column
            && self.changed_columns.len() == call.changes.len()
            && (self.changed_columns.iter().zip(call.changes))
                .all(|(column, (name, _))| column.as_bytes() == *name)
    }
}

/// How a value for one changed column is checked before the UPDATE: through the column
/// type's input function, looked up once (in the statements' memory context).
struct InputCheck {
    function: *mut pg_sys::FmgrInfo,
    io_param: pg_sys::Oid,
    typmod: i32,
}

/// What a call needs once its table and columns were validated: the saved statements, the
/// table's name for messages, and the input check of each changed column (in the order of
/// `StatementKey::changed_columns`; None where the UPDATE alone decides). Everything the
/// input functions cache (a domain's constraints, say) lives in `memory`, deleted with it.
struct Statements {
    /// The UPDATE that reads every changed value from `changes` (jsonb_populate_record).
    update: SavedPlan,
    /// The same UPDATE with each value that has an input check passed as a typed parameter
    /// ($4, $5, ... in the order of the checks): the value the check produced, not read a
    /// second time. Used unless a checked column was given an array or an object.
    update_typed: SavedPlan,
    fence_of_row: SavedPlan,
    table_name: String,
    checks: Vec<Option<InputCheck>>,
    memory: pg_sys::MemoryContext,
}

impl Drop for Statements {
    fn drop(&mut self) {
        self.update.free();
        self.update_typed.free();
        self.fence_of_row.free();
        unsafe { pg_sys::MemoryContextDelete(self.memory) };
    }
}

/// At most this many statement sets per backend; the least recently used are dropped first.
const MAX_CACHED_STATEMENTS: usize = 128;

#[derive(Default)]
struct StatementCache {
    /// The most recently used first. Few per application: a scan is cheaper than hashing.
    statements: Vec<(StatementKey, Rc<Statements>)>,
    /// Cached tables that must be prepared again (renamed, dropped, altered): the relcache
    /// callback only records them, the next call drops the statements. Only tables that have
    /// statements are recorded, so the set stays as small as the cache.
    stale_tables: HashSet<pg_sys::Oid>,
    all_stale: bool,
}

thread_local! {
    static CACHE: RefCell<StatementCache> = RefCell::new(StatementCache::default());
}

pub fn register_invalidation_callback() {
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), 0.into());
        // A renamed schema changes no table's relcache entry, but the saved statements name
        // the table through it.
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::NAMESPACEOID as _,
            Some(on_namespace_invalidation),
            0.into(),
        );
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    CACHE.with_borrow_mut(|cache| match relid {
        pg_sys::InvalidOid => cache.all_stale = true,
        relid if cache.statements.iter().any(|(key, _)| key.table == relid) => {
            cache.stale_tables.insert(relid);
        }
        _ => {}
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_namespace_invalidation(
    _arg: pg_sys::Datum,
    _cache: i32,
    _hash: u32,
) {
    CACHE.with_borrow_mut(|cache| cache.all_stale = true);
}

fn required<T>(value: Option<T>, argument: &'static str) -> T {
    types::required(value, FUNCTION, argument).or_raise()
}

fn invalid(message: String, hint: Option<&'static str>) -> ! {
    FencedError::InvalidArgument { message, hint }.raise()
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Writes `changes` and the fence to the row whose key is `id`, unless the row already
/// carries a higher token: then SF001 (the caller was superseded).
pub fn fenced_update(fcinfo: pg_sys::FunctionCallInfo) -> Result<pg_sys::Datum, RawError> {
    write(fcinfo, Superseded::Raise)
}

/// The same, returning true when written and false when the caller's token is stale, for SQL
/// that branches on it (drivers that return booleans as the strings "t" and "f", both truthy,
/// use fenced_update).
pub fn fenced_update_or_false(fcinfo: pg_sys::FunctionCallInfo) -> Result<pg_sys::Datum, RawError> {
    write(fcinfo, Superseded::ReturnFalse)
}

/// What a call does when the row carries a higher token.
#[derive(Clone, Copy, PartialEq)]
enum Superseded {
    ReturnFalse,
    Raise,
}

fn write(
    fcinfo: pg_sys::FunctionCallInfo,
    superseded: Superseded,
) -> Result<pg_sys::Datum, RawError> {
    let target = required(unsafe { argument_datum(fcinfo, 0) }, "target");
    let id = required(unsafe { argument_datum(fcinfo, 1) }, "id");
    let id_type = unsafe { pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, 1) };
    let token: i64 = required(unsafe { pgrx::fcinfo::pg_getarg(fcinfo, 2) }, "token");
    // Detoasted once (a plain value is returned as it is): read here for its keys and values,
    // passed to the UPDATE as it is.
    let changes_jsonb = unsafe {
        pg_sys::Datum::from(pg_sys::pg_detoast_datum(
            required(argument_datum(fcinfo, 3), "changes").cast_mut_ptr(),
        ))
    };
    let key_column = unsafe { text_argument(fcinfo, 4, "key_column") };
    let fence_column = unsafe { text_argument(fcinfo, 5, "fence_column") };
    let changes = unsafe { changed_values(changes_jsonb) };

    // Lock the table first, with the UPDATE's own lock: from here on it cannot be renamed or
    // dropped, and taking the lock processed the invalidations of whatever happened to it
    // before, so the statements below name this table and no other.
    let table = lock_target(fcinfo, target);
    let call = CallKey {
        table,
        key_type: id_type,
        key_column,
        fence_column,
        changes: &changes,
    };
    // $1 to $3, then the typed UPDATE's parameters: the value of each checked column, as
    // its type.
    let mut arguments = Vec::with_capacity(3 + changes.len());
    arguments.extend([
        Some(id),
        Some(pg_sys::Datum::from(token)),
        Some(changes_jsonb),
    ]);
    let written = spi::connected(|| {
        let statements = statements_for(&call);
        let mut typed = true;
        for ((name, value), check) in changes.iter().zip(&statements.checks) {
            let Some(check) = check else { continue };
            match value {
                JsonValue::Scalar(text) => arguments.push(Some(value_as_column_type(
                    &statements.table_name,
                    name,
                    check,
                    text,
                ))),
                JsonValue::Null => arguments.push(None),
                JsonValue::Structured => typed = false,
            }
        }
        let update = match typed {
            true => statements.update_typed,
            false => {
                arguments.truncate(3);
                statements.update
            }
        };
        if update.execute(&arguments) > 0 {
            return Ok(());
        }
        // Not written: the row carries a higher token, or there is no row the caller can see,
        // or row-level security lets the caller see the row but not update it.
        if statements.fence_of_row.execute(&arguments[..1]) == 0 {
            FencedError::NoSuchRow {
                table: statements.table_name.clone(),
                key_column: String::from_utf8_lossy(key_column).into_owned(),
                key: output_text(id, id_type),
            }
            .raise()
        }
        // fence_of_row reads the fence as int8; NULL (no token yet) would have been written.
        let fence = SavedPlan::first_value().map(|fence| fence.value() as i64);
        let (table, key) = (statements.table_name.clone(), output_text(id, id_type));
        match fence {
            Some(accepted) if accepted > token => Err(StaleToken {
                resource: format!(
                    "the row of {table} with \"{}\" = {key}",
                    String::from_utf8_lossy(key_column)
                ),
                accepted,
                offered: Some(token),
            }),
            _ => match row_security_applies(call.table) {
                true => FencedError::RowNotUpdatable { table, key }.raise(),
                false => FencedError::RowSkippedByTrigger { table, key }.raise(),
            },
        }
    });
    let check = match superseded {
        Superseded::ReturnFalse => Checker::FencedUpdateOrFalse,
        Superseded::Raise => Checker::FencedUpdate,
    };
    match &written {
        Ok(()) => stats::accepted(check, call.table, token),
        Err(stale) => stats::refused(check, call.table, stale),
    }
    match (written, superseded) {
        (Ok(()), _) => Ok(pg_sys::Datum::from(true)),
        (Err(stale), Superseded::ReturnFalse) => {
            stale.warn_if_tokens_went_back();
            Ok(pg_sys::Datum::from(false))
        }
        (Err(stale), Superseded::Raise) => Err(RawError::from(stale)),
    }
}

/// The target, locked in RowExclusiveLock once the caller was seen to have a right to update
/// it (before the lock, so that a role with no right cannot hold up the owner's DDL; the
/// UPDATE checks every right again): a regclass is the table its OID names (42P01 if it was
/// dropped); a table name (the text form an untyped driver parameter takes) is looked up as
/// regclass input would, through search_path.
fn lock_target(fcinfo: pg_sys::FunctionCallInfo, target: pg_sys::Datum) -> pg_sys::Oid {
    let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    match unsafe { pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, 0) } {
        pg_sys::TEXTOID => target::lock_table_named(target, mode, refuse_without_update_right),
        _ => {
            let table = pg_sys::Oid::from(target.value() as u32);
            refuse_without_update_right(table);
            unsafe { pg_sys::LockRelationOid(table, mode) };
            if !unsafe { relation_exists(table) } {
                FencedError::UndefinedTable {
                    oid: table.to_u32(),
                }
                .raise();
            }
            table
        }
    }
}

/// PostgreSQL's own 42501 unless the current user has USAGE on the table's schema and UPDATE
/// on the table or on one of its columns. Read from the catalog caches without a lock: a
/// table that is gone is left to the caller, which finds that out once it holds the lock.
fn refuse_without_update_right(table: pg_sys::Oid) {
    let role = unsafe { pg_sys::GetUserId() };
    let update = pg_sys::ACL_UPDATE as pg_sys::AclMode;
    unsafe {
        let namespace = pg_sys::get_rel_namespace(table);
        if namespace == pg_sys::InvalidOid {
            return;
        }
        if !crate::compat::schema_usage_allowed(namespace, role) {
            pg_sys::aclcheck_error(
                pg_sys::AclResult::ACLCHECK_NO_PRIV,
                pg_sys::ObjectType::OBJECT_SCHEMA,
                pg_sys::get_namespace_name(namespace),
            );
        }
        let table_right = pg_sys::pg_class_aclcheck(table, role, update);
        let column_right = || {
            pg_sys::pg_attribute_aclcheck_all(table, role, update, pg_sys::AclMaskHow::ACLMASK_ANY)
        };
        let ok = pg_sys::AclResult::ACLCHECK_OK;
        if table_right != ok && column_right() != ok {
            pg_sys::aclcheck_error(
                pg_sys::AclResult::ACLCHECK_NO_PRIV,
                pg_sys::get_relkind_objtype(pg_sys::get_rel_relkind(table)),
                pg_sys::get_rel_name(table),
            );
        }
    }
}

/// The text argument `n`'s bytes (valid for the rest of the call), or 22004 for NULL.
unsafe fn text_argument<'a>(
    fcinfo: pg_sys::FunctionCallInfo,
    n: usize,
    argument: &'static str,
) -> &'a [u8] {
    unsafe { text_bytes(required(argument_datum(fcinfo, n), argument)) }
}

/// Argument `n` as PostgreSQL passed it, or None for NULL.
unsafe fn argument_datum(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> Option<pg_sys::Datum> {
    let argument = unsafe { *(*fcinfo).args.as_slice((*fcinfo).nargs as usize).get(n)? };
    (!argument.isnull).then_some(argument.value)
}

/// Whether row-level security applies to the current user's queries on `table`: when it does
/// not, only a BEFORE UPDATE trigger (or a rule) can have kept a visible row from the UPDATE.
fn row_security_applies(table: pg_sys::Oid) -> bool {
    let enabled = pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32;
    unsafe { pg_sys::check_enable_rls(table, pg_sys::InvalidOid, false) == enabled }
}

unsafe fn relation_exists(table: pg_sys::Oid) -> bool {
    let zero = pg_sys::Datum::from(0);
    unsafe {
        pg_sys::SearchSysCacheExists(
            pg_sys::SysCacheIdentifier::RELOID as _,
            pg_sys::Datum::from(table),
            zero,
            zero,
            zero,
        )
    }
}

/// A value of `changes`, as a column sees it.
enum JsonValue<'a> {
    /// A string, number or boolean, as text (as `jsonb_populate_record` would read it:
    /// numbers exactly, big or long ones included), allocated for the call.
    Scalar(&'a CStr),
    Null,
    /// An array or an object: jsonb_populate_record alone converts it (to an array or a
    /// composite column).
    Structured,
}

/// The top-level keys of the detoasted `changes` object in jsonb's own order (pointing into
/// it), with their values.
///
/// # Safety
/// `changes` must be a detoasted jsonb that outlives the result.
unsafe fn changed_values<'a>(changes: pg_sys::Datum) -> Vec<(&'a [u8], JsonValue<'a>)> {
    use pg_sys::jbvType as kind;
    use pg_sys::JsonbIteratorToken::*;
    unsafe {
        let jsonb = changes.cast_mut_ptr::<pg_sys::Jsonb>();
        if (*jsonb).root.header & pg_sys::JB_FOBJECT == 0 {
            invalid(
                format!("{FUNCTION}: changes must be a JSON object"),
                Some("Pass the new values as '{\"column\": value, ...}'."),
            );
        }
        let mut iterator = pg_sys::JsonbIteratorInit(&mut (*jsonb).root);
        let mut value = pg_sys::JsonbValue::default();
        let mut pairs = Vec::with_capacity(((*jsonb).root.header & pg_sys::JB_CMASK) as usize);
        let mut key: &[u8] = &[];
        loop {
            match pg_sys::JsonbIteratorNext(&mut iterator, &mut value, true) {
                WJB_KEY => key = jsonb_string(&value),
                WJB_VALUE => {
                    let text = match value.type_ {
                        // A copy with its NUL: jsonb strings hold none (jsonb refuses \u0000).
                        kind::jbvString => JsonValue::Scalar(CStr::from_ptr(pg_sys::pnstrdup(
                            value.val.string.val,
                            value.val.string.len as _,
                        ))),
                        kind::jbvNumeric => {
                            JsonValue::Scalar(CStr::from_ptr(pg_sys::OidOutputFunctionCall(
                                pg_sys::Oid::from(pg_sys::F_NUMERIC_OUT),
                                pg_sys::Datum::from(value.val.numeric),
                            )))
                        }
                        kind::jbvBool => JsonValue::Scalar(match value.val.boolean {
                            true => c"true",
                            false => c"false",
                        }),
                        kind::jbvNull => JsonValue::Null,
                        _ => JsonValue::Structured,
                    };
                    pairs.push((key, text));
                }
                WJB_DONE => break,
                _ => {}
            }
        }
        pairs
    }
}

/// A jsonb string's bytes, where the jsonb holds them.
unsafe fn jsonb_string<'a>(value: &pg_sys::JsonbValue) -> &'a [u8] {
    unsafe {
        let string = value.val.string;
        std::slice::from_raw_parts(string.val.cast::<u8>(), string.len as usize)
    }
}

/// The statements for `call`: validated and prepared on first use (stale ones are dropped
/// first), then shared. An Rc, so that a nested call (a trigger that calls fenced_update) can
/// use and even replace the cache while this call still holds its statements.
fn statements_for(call: &CallKey) -> Rc<Statements> {
    // Dropped statements are freed once the cache is no longer borrowed.
    let mut dropped = Vec::new();
    let cached = CACHE.with_borrow_mut(|cache| {
        if std::mem::take(&mut cache.all_stale) {
            let tables = cache.statements.iter().map(|(key, _)| key.table);
            cache.stale_tables.extend(tables);
        }
        if !cache.stale_tables.is_empty() {
            let stale = std::mem::take(&mut cache.stale_tables);
            let (gone, kept) = std::mem::take(&mut cache.statements)
                .into_iter()
                .partition(|(key, _)| stale.contains(&key.table));
            cache.statements = kept;
            dropped = gone;
        }
        let position = cache
            .statements
            .iter()
            .position(|(key, _)| key.matches(call))?;
        cache.statements[..=position].rotate_right(1);
        Some(cache.statements[0].1.clone())
    });
    drop(dropped);
    cached.unwrap_or_else(|| {
        // Validation may raise an error: nothing is cached until it has passed.
        let key = StatementKey::of(call);
        let statements = Rc::new(validate_and_prepare(&key));
        let evicted = CACHE.with_borrow_mut(|cache| {
            cache.statements.insert(0, (key, statements.clone()));
            cache
                .statements
                .split_off(MAX_CACHED_STATEMENTS.min(cache.statements.len()))
        });
        drop(evicted);
        statements
    })
}

/// Checks the table, the key and fence columns and every changed column (raising the
/// documented errors), then prepares the statements.
fn validate_and_prepare(key: &StatementKey) -> Statements {
    // Locked by the caller already; NoLock only looks it up.
    let relation = unsafe { pg_sys::relation_open(key.table, pg_sys::NoLock as _) };
    let table_name = unsafe { relation_display_name(relation) };
    let relkind = unsafe { (*(*relation).rd_rel).relkind } as u8;
    if ![pg_sys::RELKIND_RELATION, pg_sys::RELKIND_PARTITIONED_TABLE].contains(&relkind) {
        FencedError::NotATable { table: table_name }.raise();
    }
    let key_column = unsafe { find_column(relation, &key.key_column) };
    unsafe { find_fence_column(relation, &key.fence_column) };
    let columns: Vec<Column> = key
        .changed_columns
        .iter()
        .map(|name| {
            if *name == key.key_column || *name == key.fence_column {
                invalid(
                    format!(
                        "{FUNCTION}: changes must not name the key column or the fence column \"{name}\""
                    ),
                    Some("The key selects the row and the fence column receives the token."),
                );
            }
            unsafe { find_column(relation, name) }
        })
        .collect();
    unsafe { pg_sys::relation_close(relation, pg_sys::NoLock as _) };
    let memory = small_memory_context(
        unsafe { pg_sys::CacheMemoryContext },
        c"fenced_update statements",
    );
    let checks: Vec<Option<InputCheck>> = columns
        .iter()
        .map(|column| input_check(column, memory))
        .collect();
    let checked: Vec<Option<pg_sys::Oid>> = columns
        .iter()
        .zip(&checks)
        .map(|(column, check)| check.as_ref().map(|_| column.type_oid))
        .collect();
    let (update, update_typed, fence_of_row) =
        prepare_statements(key, &key_column, &checked, &table_name);
    Statements {
        update,
        update_typed,
        fence_of_row,
        table_name,
        checks,
        memory,
    }
}

/// The UPDATE (every value from `changes`), the typed UPDATE (checked columns' values as
/// parameters typed by `checked`, the type of each changed column that has an input check),
/// and the fence of a row.
fn prepare_statements(
    key: &StatementKey,
    key_column: &Column,
    checked: &[Option<pg_sys::Oid>],
    table_name: &str,
) -> (SavedPlan, SavedPlan, SavedPlan) {
    // A text id (what an untyped driver parameter becomes; JDBC's strings are varchar) is
    // read as the key column's type, as a literal would be: '42' for an integer key, a UUID's
    // text for a uuid key. As the type itself, without the column's typmod (a varchar(8)
    // would truncate, a numeric(6,2) round) and as a domain's base type (a literal compares
    // as that, unchecked): the id matches exactly the rows a literal would. The type's name
    // is written as "no typmod given" asks for: a bare `character` or `bit` would parse as
    // character(1) or bit(1) (and '12' match '1'), so those print as bpchar and "bit".
    let text_id = [pg_sys::TEXTOID, pg_sys::VARCHAROID].contains(&key.key_type);
    let key_value = match text_id && key_column.type_oid != pg_sys::TEXTOID {
        true => format!("CAST($1 AS {})", unsafe {
            CStr::from_ptr(pg_sys::format_type_extended(
                pg_sys::getBaseType(key_column.type_oid),
                -1,
                (pg_sys::FORMAT_TYPE_TYPEMOD_GIVEN | pg_sys::FORMAT_TYPE_FORCE_QUALIFY) as _,
            ))
            .to_string_lossy()
        }),
        false => "$1".to_string(),
    };
    let key_column = quote_ident(&key.key_column);
    let fence = quote_ident(&key.fence_column);
    // An UPDATE whose changed columns take their values from `value_of`: Some(expression),
    // or None to read the column from jsonb_populate_record, which types every value by its
    // column, as documented.
    let update = |value_of: &dyn Fn(usize) -> Option<String>| {
        let mut from_record = false;
        let assignments: String = (key.changed_columns.iter().enumerate())
            .map(|(index, column)| {
                let column = quote_ident(column);
                let value = value_of(index).unwrap_or_else(|| {
                    from_record = true;
                    format!("r.{column}")
                });
                format!("{column} = {value}, ")
            })
            .collect();
        let source = match from_record {
            true => format!(" FROM pg_catalog.jsonb_populate_record(NULL::{table_name}, $3) AS r"),
            false => String::new(),
        };
        format!(
            "UPDATE {table_name} AS t SET {assignments}{fence} = $2{source} \
             WHERE t.{key_column} = {key_value} AND (t.{fence} OPERATOR(pg_catalog.<=) $2 OR t.{fence} IS NULL)"
        )
    };
    // The typed UPDATE's parameter numbers: $4 onwards, for the checked columns in order.
    let parameters: Vec<Option<usize>> = checked
        .iter()
        .scan(4, |next, checked| {
            Some(checked.map(|_| {
                *next += 1;
                *next - 1
            }))
        })
        .collect();
    let typed_update = update(&|index| parameters[index].map(|n| format!("${n}")));
    let fence_of_row = format!(
        "SELECT t.{fence}::pg_catalog.int8 FROM {table_name} AS t \
         WHERE t.{key_column} = {key_value}"
    );
    let types = [key.key_type, pg_sys::INT8OID, pg_sys::JSONBOID];
    let typed_types: Vec<pg_sys::Oid> = types
        .iter()
        .copied()
        .chain(checked.iter().flatten().copied())
        .collect();
    (
        spi::prepare(&update(&|_| None), &types),
        spi::prepare(&typed_update, &typed_types),
        spi::prepare(&fence_of_row, &types[..1]),
    )
}

/// The input check for a column, or None where the UPDATE alone decides: json/jsonb columns
/// keep JSON as it is, composite columns take objects.
fn input_check(column: &Column, memory: pg_sys::MemoryContext) -> Option<InputCheck> {
    let skip = [pg_sys::JSONOID, pg_sys::JSONBOID].contains(&column.type_oid)
        || unsafe { pg_sys::get_typtype(column.type_oid) } as u8 == pg_sys::TYPTYPE_COMPOSITE;
    if skip {
        return None;
    }
    unsafe {
        let (mut input, mut io_param) = (pg_sys::InvalidOid, pg_sys::InvalidOid);
        pg_sys::getTypeInputInfo(column.type_oid, &mut input, &mut io_param);
        let function =
            pg_sys::MemoryContextAllocZero(memory, std::mem::size_of::<pg_sys::FmgrInfo>())
                as *mut pg_sys::FmgrInfo;
        pg_sys::fmgr_info_cxt(input, function, memory);
        Some(InputCheck {
            function,
            io_param,
            typmod: column.typmod,
        })
    }
}

/// A scalar JSON value for a scalar column, through the column type's input function (as
/// jsonb_populate_record would): the value for the typed UPDATE. A value that does not fit is
/// reported with its column (and the type's own SQLSTATE, a domain's custom code included).
fn value_as_column_type(
    table_name: &str,
    column_name: &[u8],
    check: &InputCheck,
    text: &CStr,
) -> pg_sys::Datum {
    PgTryBuilder::new(|| unsafe {
        pg_sys::InputFunctionCall(
            check.function,
            text.as_ptr().cast_mut(),
            check.io_param,
            check.typmod,
        )
    })
    .catch_others(|error| match error {
        CaughtError::PostgresError(report) => RawError::value_does_not_fit(
            table_name,
            &String::from_utf8_lossy(column_name),
            &report,
            original_sqlstate(&report),
        )
        .raise_at_entry(),
        other => other.rethrow(),
    })
    .execute()
}

/// `datum` as its type's text output, for messages.
fn output_text(datum: pg_sys::Datum, type_oid: pg_sys::Oid) -> String {
    unsafe {
        let (mut output, mut is_varlena) = (pg_sys::InvalidOid, false);
        pg_sys::getTypeOutputInfo(type_oid, &mut output, &mut is_varlena);
        CStr::from_ptr(pg_sys::OidOutputFunctionCall(output, datum))
            .to_string_lossy()
            .into_owned()
    }
}
