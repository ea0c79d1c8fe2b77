//! The fence ledger, for resources outside the database: `fence_ledger` keeps the highest
//! token accepted per resource name. fence_check accepts a token at least as high as the
//! stored one (or for a new resource) and stores it, atomically: INSERT ... ON CONFLICT DO
//! UPDATE locks the row, and a concurrent check re-evaluates against the committed maximum.

use crate::errors::{OrRaise, RawError, StaleToken};
use crate::spi::{self, SavedPlan};
use crate::stats::{self, Checker};
use crate::types::required;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

/// Unqualified: both functions run with search_path set to the extension's schema.
const ACCEPT: &str = "INSERT INTO fence_ledger AS l (resource, token, updated_at) \
     VALUES ($1, $2, pg_catalog.now()) ON CONFLICT (resource) DO UPDATE \
     SET token = excluded.token, updated_at = excluded.updated_at \
     WHERE l.token <= excluded.token";
const STORED: &str = "SELECT token FROM fence_ledger WHERE resource = $1";

thread_local! {
    static PLANS: Cell<Option<(SavedPlan, SavedPlan)>> = const { Cell::new(None) };
}

/// Stores `token` for `resource` if it is not lower than the stored token; otherwise returns
/// the stored token.
fn accept(resource: &str, token: i64) -> Result<(), i64> {
    spi::connected(|| {
        let (accept, stored) = PLANS.get().unwrap_or_else(|| {
            let plans = (
                spi::prepare(ACCEPT, &[pg_sys::TEXTOID, pg_sys::INT8OID]),
                spi::prepare(STORED, &[pg_sys::TEXTOID]),
            );
            PLANS.set(Some(plans));
            plans
        });
        let resource = resource.into_datum();
        if accept.execute(&[resource, token.into_datum()]) == 1 {
            return Ok(());
        }
        stored.execute(&[resource]);
        Err(SavedPlan::first_value().map_or(token, |datum| datum.value() as i64))
    })
}

/// fence_check_or_false(resource, token): records `token` as the highest accepted for
/// `resource` and returns true, or returns false when a higher token was already accepted.
pub fn check_or_false(fcinfo: pg_sys::FunctionCallInfo) -> Result<pg_sys::Datum, RawError> {
    let (resource, token) = arguments(fcinfo, "fence_check_or_false");
    let accepted = counted(Checker::FenceCheckOrFalse, &resource, token)
        .map_err(StaleToken::warn_if_tokens_went_back)
        .is_ok();
    Ok(pg_sys::Datum::from(accepted))
}

/// The two arguments, both required (22004).
fn arguments(fcinfo: pg_sys::FunctionCallInfo, function: &'static str) -> (String, i64) {
    let resource: Option<String> = unsafe { pgrx::fcinfo::pg_getarg(fcinfo, 0) };
    let token: Option<i64> = unsafe { pgrx::fcinfo::pg_getarg(fcinfo, 1) };
    (
        required(resource, function, "resource").or_raise(),
        required(token, function, "token").or_raise(),
    )
}

/// `accept`, counted in fenced_lock_refusals (the ledger's table, by check) and logged when
/// refused.
fn counted(check: Checker, resource: &str, token: i64) -> Result<(), StaleToken> {
    // Both functions run with search_path set to the extension's schema.
    let ledger = unsafe { pg_sys::RelnameGetRelid(c"fence_ledger".as_ptr()) };
    match accept(resource, token) {
        Ok(()) => {
            stats::accepted(check, ledger, token);
            Ok(())
        }
        Err(accepted) => {
            let stale = stale(resource, accepted, token);
            stats::refused(check, ledger, &stale);
            Err(stale)
        }
    }
}

/// fence_check(resource, token): records `token` as the highest accepted for `resource`, or
/// raises SF001 when a higher token was already accepted.
pub fn check(fcinfo: pg_sys::FunctionCallInfo) -> Result<pg_sys::Datum, RawError> {
    let (resource, token) = arguments(fcinfo, "fence_check");
    counted(Checker::FenceCheck, &resource, token)
        .map(|()| pg_sys::Datum::from(0))
        .map_err(RawError::from)
}

fn stale(resource: &str, accepted: i64, token: i64) -> StaleToken {
    StaleToken {
        resource: format!("resource \"{resource}\""),
        accepted,
        offered: Some(token),
    }
}
