//! The few SPI calls fenced_lock needs (the resource side, leases), over saved plans: prepared
//! once per backend, kept across transactions, revalidated by PostgreSQL's plan cache when
//! tables change.

use pgrx::pg_sys;
use std::ffi::CString;

/// A plan saved with SPI_keepplan; freed with `free`.
#[derive(Clone, Copy)]
pub struct SavedPlan(pg_sys::SPIPlanPtr);

/// Runs `work` inside an SPI connection. On an ERROR, PostgreSQL's transaction abort closes
/// the connection.
pub fn connected<R>(work: impl FnOnce() -> R) -> R {
    unsafe { pg_sys::SPI_connect() };
    let result = work();
    unsafe { pg_sys::SPI_finish() };
    result
}

/// Prepares and saves `sql`; call inside `connected`.
pub fn prepare(sql: &str, argument_types: &[pg_sys::Oid]) -> SavedPlan {
    let sql = CString::new(sql).expect("generated SQL has no NUL");
    unsafe {
        let plan = pg_sys::SPI_prepare(
            sql.as_ptr(),
            argument_types.len() as i32,
            argument_types.as_ptr().cast_mut(),
        );
        if plan.is_null() {
            let code = std::ptr::addr_of!(pg_sys::SPI_result).read();
            crate::errors::FencedError::Internal {
                what: "preparing a statement",
                error: format!("SPI_prepare failed with code {code}"),
            }
            .raise();
        }
        pg_sys::SPI_keepplan(plan);
        SavedPlan(plan)
    }
}

impl SavedPlan {
    /// Executes the plan with `arguments` (None for NULL); returns the rows processed.
    pub fn execute(self, arguments: &[Option<pg_sys::Datum>]) -> u64 {
        let mut values: Vec<pg_sys::Datum> = arguments
            .iter()
            .map(|argument| argument.unwrap_or(pg_sys::Datum::from(0)))
            .collect();
        let nulls: Vec<core::ffi::c_char> = arguments
            .iter()
            .map(|argument| if argument.is_some() { b' ' } else { b'n' } as core::ffi::c_char)
            .collect();
        unsafe {
            pg_sys::SPI_execute_plan(self.0, values.as_mut_ptr(), nulls.as_ptr(), false, 0);
            pg_sys::SPI_processed
        }
    }

    /// The first column of the first row the last `execute` returned, if any and not NULL.
    pub fn first_value() -> Option<pg_sys::Datum> {
        SavedPlan::value(0, 1)
    }

    /// Column `column` (from 1) of row `row` (from 0) of what the last `execute` returned,
    /// if there is such a row and the value is not NULL. A value passed by reference lives
    /// until the next `execute`.
    pub fn value(row: u64, column: i32) -> Option<pg_sys::Datum> {
        unsafe {
            let table = pg_sys::SPI_tuptable;
            if table.is_null() || row >= pg_sys::SPI_processed {
                return None;
            }
            let mut is_null = false;
            let tuple = *(*table).vals.add(row as usize);
            let datum = pg_sys::SPI_getbinval(tuple, (*table).tupdesc, column, &mut is_null);
            (!is_null).then_some(datum)
        }
    }

    pub fn free(self) {
        unsafe { pg_sys::SPI_freeplan(self.0) };
    }
}
