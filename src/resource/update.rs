//! fenced_update(target, id, token, changes, key_column, fence_column): in one statement,
//! `UPDATE target SET <changes>, <fence> = token WHERE <key> = id AND <fence> <= token`.
//! Equal tokens pass on purpose: a token belongs to one grant, so an equal token is the same
//! holder writing again. Runs with the caller's rights (column privileges and row-level
//! security apply); identifiers are quoted, values are always parameters.

use super::spi::{self, SavedPlan};
use super::{find_column, find_fence_column, relation_display_name, Column};
use crate::errors::FencedError;
use pgrx::callconv::{Arg, ArgAbi};
use pgrx::datum::AnyElement;
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::rc::Rc;

const FUNCTION: &str = "fenced_update";

/// The `regclass` argument, as a plain OID: the table is opened once, with the lock the
/// UPDATE takes anyway (RowExclusiveLock), never a weaker one first.
pub struct TargetTable(pg_sys::Oid);

impl FromDatum for TargetTable {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        (!is_null).then(|| TargetTable(pg_sys::Oid::from(datum.value() as u32)))
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for TargetTable {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        unsafe { arg.unbox_arg_using_from_datum() }.expect("target is not NULL here")
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

unsafe impl SqlTranslatable for TargetTable {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(TargetTable);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
        Ok(SqlMappingRef::literal("regclass"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("regclass")));
}

/// What a saved UPDATE depends on, besides the table's definition (which the plan cache
/// tracks): the statement text is built from these.
#[derive(PartialEq, Eq, Hash)]
struct StatementKey {
    table: pg_sys::Oid,
    key_type: pg_sys::Oid,
    key_column: String,
    fence_column: String,
    changed_columns: Vec<String>,
}

/// How a value for one changed column is checked before the UPDATE: through the column
/// type's input function, looked up once.
struct InputCheck {
    function: Box<pg_sys::FmgrInfo>,
    io_param: pg_sys::Oid,
    typmod: i32,
}

/// What a call needs once its table and columns were validated: the saved statements, the
/// table's name for messages, and the input check of each changed column (in the order of
/// `StatementKey::changed_columns`; None where the UPDATE alone decides).
struct Statements {
    update: SavedPlan,
    row_exists: SavedPlan,
    table_name: String,
    checks: Vec<Option<InputCheck>>,
}

impl Drop for Statements {
    fn drop(&mut self) {
        self.update.free();
        self.row_exists.free();
    }
}

#[derive(Default)]
struct StatementCache {
    statements: HashMap<StatementKey, Rc<Statements>>,
    /// Tables whose statements must be prepared again (renamed, dropped, altered): the
    /// relcache callback only records them, the next call drops the statements.
    stale_tables: HashSet<pg_sys::Oid>,
    all_stale: bool,
}

thread_local! {
    static CACHE: RefCell<StatementCache> = RefCell::new(StatementCache::default());
}

pub fn register_invalidation_callback() {
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), 0.into()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    CACHE.with_borrow_mut(|cache| match relid {
        pg_sys::InvalidOid => cache.all_stale = true,
        relid => {
            cache.stale_tables.insert(relid);
        }
    });
}

fn required<T>(value: Option<T>, argument: &'static str) -> T {
    value.unwrap_or_else(|| {
        FencedError::NullArgument {
            function: FUNCTION,
            argument,
        }
        .raise()
    })
}

fn invalid(message: String, hint: Option<&'static str>) -> ! {
    FencedError::InvalidArgument { message, hint }.raise()
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Writes `changes` and the fence to the row whose key is `id`, unless the row already
/// carries a higher token: true when written, false when the caller's token is stale.
#[pg_extern(volatile, parallel_unsafe)]
fn fenced_update(
    target: Option<TargetTable>,
    id: Option<AnyElement>,
    token: Option<i64>,
    changes: default!(Option<JsonB>, "'{}'"),
    key_column: default!(Option<&str>, "'id'"),
    fence_column: default!(Option<&str>, "'fence'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> bool {
    let table = required(target, "target").0;
    let id = required(id, "id");
    let token = required(token, "token");
    let Value::Object(changes) = required(changes, "changes").0 else {
        invalid(
            format!("{FUNCTION}: changes must be a JSON object"),
            Some("Pass the new values as '{\"column\": value, ...}'."),
        )
    };
    let key_column = required(key_column, "key_column");
    let fence_column = required(fence_column, "fence_column");
    // The jsonb argument as PostgreSQL holds it, passed to the UPDATE unchanged.
    let changes_datum = unsafe { pgrx::fcinfo::pg_getarg_datum(fcinfo, 3) };
    let mut changes: Vec<(String, Value)> = changes.into_iter().collect();
    changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));

    let key = StatementKey {
        table,
        key_type: id.oid(),
        key_column: key_column.to_string(),
        fence_column: fence_column.to_string(),
        changed_columns: changes.iter().map(|(name, _)| name.clone()).collect(),
    };
    let arguments = [Some(id.datum()), token.into_datum(), changes_datum];
    spi::connected(|| {
        let statements = statements_for(key);
        for ((name, value), check) in changes.iter().zip(&statements.checks) {
            if let Some(check) = check {
                check_value_fits(&statements.table_name, name, check, value);
            }
        }
        if statements.update.execute(&arguments) > 0 {
            return true;
        }
        if statements.row_exists.execute(&arguments[..1]) > 0 {
            return false;
        }
        FencedError::NoSuchRow {
            table: statements.table_name.clone(),
            key_column: key_column.to_string(),
            key: output_text(id.datum(), id.oid()),
        }
        .raise()
    })
}

/// The statements for `key`: validated and prepared on first use (stale ones are dropped
/// first), then shared. An Rc, so that a nested call (a trigger that calls fenced_update) can
/// use and even replace the cache while this call still holds its statements.
fn statements_for(key: StatementKey) -> Rc<Statements> {
    let cached = CACHE.with_borrow_mut(|cache| {
        if std::mem::take(&mut cache.all_stale) {
            cache
                .stale_tables
                .extend(cache.statements.keys().map(|key| key.table));
        }
        if !cache.stale_tables.is_empty() {
            let stale = std::mem::take(&mut cache.stale_tables);
            cache
                .statements
                .retain(|key, _| !stale.contains(&key.table));
        }
        cache.statements.get(&key).cloned()
    });
    cached.unwrap_or_else(|| {
        // Validation may raise an error: nothing is cached until it has passed.
        let statements = Rc::new(validate_and_prepare(&key));
        CACHE.with_borrow_mut(|cache| cache.statements.insert(key, statements.clone()));
        statements
    })
}

/// Checks the table, the key and fence columns and every changed column (raising the
/// documented errors), then prepares the statements.
fn validate_and_prepare(key: &StatementKey) -> Statements {
    let relation = unsafe { pg_sys::relation_open(key.table, pg_sys::RowExclusiveLock as _) };
    let table_name = unsafe { relation_display_name(relation) };
    let relkind = unsafe { (*(*relation).rd_rel).relkind } as u8;
    if ![pg_sys::RELKIND_RELATION, pg_sys::RELKIND_PARTITIONED_TABLE].contains(&relkind) {
        FencedError::NotATable { table: table_name }.raise();
    }
    unsafe { find_column(relation, &key.key_column) };
    unsafe { find_fence_column(relation, &key.fence_column) };
    let checks = key
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
            input_check(&unsafe { find_column(relation, name) })
        })
        .collect();
    unsafe { pg_sys::relation_close(relation, pg_sys::NoLock as _) };
    let (update, row_exists) = prepare_statements(key, &table_name);
    Statements {
        update,
        row_exists,
        table_name,
        checks,
    }
}

fn prepare_statements(key: &StatementKey, table_name: &str) -> (SavedPlan, SavedPlan) {
    let key_column = quote_ident(&key.key_column);
    let fence = quote_ident(&key.fence_column);
    let assignments: String = key
        .changed_columns
        .iter()
        .map(|column| format!("{0} = r.{0}, ", quote_ident(column)))
        .collect();
    // jsonb_populate_record types every value by its column, as documented.
    let source = match key.changed_columns.is_empty() {
        true => String::new(),
        false => format!(" FROM pg_catalog.jsonb_populate_record(NULL::{table_name}, $3) AS r"),
    };
    let update = format!(
        "UPDATE {table_name} AS t SET {assignments}{fence} = $2{source} \
         WHERE t.{key_column} = $1 AND t.{fence} <= $2"
    );
    let row_exists = format!("SELECT 1 FROM {table_name} AS t WHERE t.{key_column} = $1");
    let types = [key.key_type, pg_sys::INT8OID, pg_sys::JSONBOID];
    (
        spi::prepare(&update, &types),
        spi::prepare(&row_exists, &types[..1]),
    )
}

/// The input check for a column, or None where the UPDATE alone decides: json/jsonb columns
/// keep JSON as it is, composite columns take objects.
fn input_check(column: &Column) -> Option<InputCheck> {
    let skip = [pg_sys::JSONOID, pg_sys::JSONBOID].contains(&column.type_oid)
        || unsafe { pg_sys::get_typtype(column.type_oid) } as u8 == pg_sys::TYPTYPE_COMPOSITE;
    if skip {
        return None;
    }
    unsafe {
        let (mut input, mut io_param) = (pg_sys::InvalidOid, pg_sys::InvalidOid);
        pg_sys::getTypeInputInfo(column.type_oid, &mut input, &mut io_param);
        let mut function = Box::new(pg_sys::FmgrInfo::default());
        pg_sys::fmgr_info_cxt(input, &mut *function, pg_sys::TopMemoryContext);
        Some(InputCheck {
            function,
            io_param,
            typmod: column.typmod,
        })
    }
}

/// A scalar JSON value for a scalar column goes through the column type's input function in
/// the UPDATE; run it first, so a value that does not fit is reported with its column (and
/// the type's own SQLSTATE). Arrays and objects are left to the UPDATE.
fn check_value_fits(table_name: &str, column_name: &str, check: &InputCheck, value: &Value) {
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        Value::Null | Value::Array(_) | Value::Object(_) => return,
    };
    let Ok(text) = CString::new(text) else {
        invalid(
            format!("{FUNCTION}: value for column \"{column_name}\" contains a NUL character"),
            None,
        )
    };
    // InputFunctionCall takes a mutable FmgrInfo but only reads it after fmgr_info.
    let function = &*check.function as *const pg_sys::FmgrInfo as *mut pg_sys::FmgrInfo;
    PgTryBuilder::new(|| unsafe {
        pg_sys::InputFunctionCall(
            function,
            text.as_ptr().cast_mut(),
            check.io_param,
            check.typmod,
        );
    })
    .catch_others(|error| match error {
        CaughtError::PostgresError(report) => FencedError::ValueDoesNotFit {
            code: report.sql_error_code(),
            table: table_name.to_string(),
            column: column_name.to_string(),
            message: report.message().to_string(),
        }
        .raise(),
        other => other.rethrow(),
    })
    .execute();
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
