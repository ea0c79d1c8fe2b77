//! The statements the library sends, how, and the owner ids it makes.
//!
//! Every statement goes with [`query_typed`](tokio_postgres::Client::query_typed): the unnamed
//! statement, its parameter types given, parsed, bound and run in one round trip. `query`
//! would prepare a named statement first, which behind a transaction-mode pooler is missing
//! on the next server connection.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::GenericClient;

use crate::errors::{Error, ErrorKind};

const KEY: &str = "$1::int4, $2::int4";

pub(crate) fn acquire_sql(shared: bool, timeout: bool) -> String {
    match (shared, timeout) {
        (false, false) => format!("SELECT acquire_fenced({KEY})"),
        (false, true) => format!("SELECT acquire_fenced({KEY}, $3::interval)"),
        (true, false) => format!("SELECT acquire_fenced({KEY}, shared => true)"),
        (true, true) => format!("SELECT acquire_fenced({KEY}, $3::interval, true)"),
    }
}

pub(crate) fn try_acquire_sql(shared: bool) -> String {
    format!("SELECT try_acquire_fenced({KEY}, {shared})")
}

pub(crate) const ACQUIRE_LEASE: &str =
    "SELECT try_acquire_lease($1::int4, $2::int4, $3::text, $4::interval)";
pub(crate) const ACQUIRE_LEASE_WAIT: &str =
    "SELECT acquire_lease($1::int4, $2::int4, $3::text, $4::interval, $5::interval)";
pub(crate) const RENEW_LEASE: &str =
    "SELECT renew_lease($1::int4, $2::int4, $3::int8, $4::interval)";
pub(crate) const RELEASE_LEASE: &str = "SELECT release_lease($1::int4, $2::int4, $3::int8)";
// The text forms: the key is read as the key column's type, whatever the Rust value's type.
pub(crate) const FENCED_UPDATE: &str =
    "SELECT fenced_update($1::text, $2::text, $3::int8, $4::text::jsonb, $5::text, $6::text)";
pub(crate) const FENCE_CHECK: &str = "SELECT fence_check($1::text, $2::int8)";

/// A parameter: its value and the type it is sent as.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// Sends `sql` (unnamed, typed) and returns the first column of its row, or the typed error.
pub(crate) async fn value<C, T>(client: &C, sql: &str, params: &[Param<'_>]) -> Result<T, Error>
where
    C: GenericClient + Sync,
    T: for<'r> tokio_postgres::types::FromSql<'r>,
{
    let row = client.query_typed_one(sql, params).await?;
    Ok(row.try_get(0)?)
}

/// Sends `sql` (unnamed, typed) for its effect alone (the functions that return void).
pub(crate) async fn run<C>(client: &C, sql: &str, params: &[Param<'_>]) -> Result<(), Error>
where
    C: GenericClient + Sync,
{
    client.query_typed(sql, params).await?;
    Ok(())
}

/// A duration as the interval text the server reads (microseconds, its precision).
pub(crate) fn interval(name: &str, duration: Duration, positive: bool) -> Result<String, Error> {
    if positive && duration.is_zero() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{name} must be positive"),
        ));
    }
    Ok(format!("{} microseconds", duration.as_micros()))
}

/// An owner id no other holder has: host, process and a random part.
pub fn new_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "localhost".to_owned());
    let host: String = host.trim().chars().take(64).collect();
    // RandomState is seeded from the operating system's randomness.
    let mut random = RandomState::new().build_hasher();
    random.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{host}:{}:{:016x}", std::process::id(), random.finish())
}
