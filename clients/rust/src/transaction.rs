//! The transaction lock and the guarded writes: statements in the caller's transaction.

use std::fmt::Display;
use std::time::Duration;

use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Transaction};

use crate::errors::Error;
use crate::statements::{self, interval, run, value};

/// How [`acquire`] takes the lock.
#[derive(Clone, Copy, Debug, Default)]
pub struct AcquireOptions {
    /// Wait at most this long, then [`ErrorKind::LockBusy`](crate::ErrorKind::LockBusy);
    /// without it, wait as long as it takes.
    pub timeout: Option<Duration>,
    /// The shared form (`acquire_fenced_shared`): other shared holders may hold it too.
    pub shared: bool,
}

/// Takes the transaction-scoped lock on (ns, id) inside the caller's transaction (a
/// [`Transaction`]: outside one the lock would end with the statement) and returns its fencing
/// token.
pub async fn acquire(
    tx: &Transaction<'_>,
    ns: i32,
    id: i32,
    options: AcquireOptions,
) -> Result<i64, Error> {
    let sql = statements::acquire_sql(options.shared, options.timeout.is_some());
    match options.timeout {
        None => value(tx, &sql, &[(&ns, Type::INT4), (&id, Type::INT4)]).await,
        Some(timeout) => {
            let timeout = interval("timeout", timeout, false)?;
            value(
                tx,
                &sql,
                &[(&ns, Type::INT4), (&id, Type::INT4), (&timeout, Type::TEXT)],
            )
            .await
        }
    }
}

/// The token, or None at once when another session holds (ns, id).
pub async fn try_acquire(
    tx: &Transaction<'_>,
    ns: i32,
    id: i32,
    shared: bool,
) -> Result<Option<i64>, Error> {
    value(
        tx,
        &statements::try_acquire_sql(shared),
        &[(&ns, Type::INT4), (&id, Type::INT4)],
    )
    .await
}

/// Writes `changes` (a JSON object: column to value) to the row `key` of `table` and its
/// `fence` column to `token`, unless the row accepted a larger token: then
/// [`ErrorKind::StaleToken`](crate::ErrorKind::StaleToken), and nothing is written. The key
/// column is `id`; [`fenced_update_columns`] names others.
pub async fn fenced_update<C: GenericClient + Sync>(
    client: &C,
    table: &str,
    key: impl Display,
    token: i64,
    changes: &serde_json::Value,
) -> Result<(), Error> {
    fenced_update_columns(client, table, key, token, changes, "id", "fence").await
}

/// [`fenced_update`] with the key and fence columns named.
pub async fn fenced_update_columns<C: GenericClient + Sync>(
    client: &C,
    table: &str,
    key: impl Display,
    token: i64,
    changes: &serde_json::Value,
    key_column: &str,
    fence_column: &str,
) -> Result<(), Error> {
    let (key, changes) = (key.to_string(), changes.to_string());
    run(
        client,
        statements::FENCED_UPDATE,
        &[
            (&table, Type::TEXT),
            (&key, Type::TEXT),
            (&token, Type::INT8),
            (&changes, Type::TEXT),
            (&key_column, Type::TEXT),
            (&fence_column, Type::TEXT),
        ],
    )
    .await
}

/// Records `token` as the highest `resource` accepted, or
/// [`ErrorKind::StaleToken`](crate::ErrorKind::StaleToken).
pub async fn fence_check<C: GenericClient + Sync>(
    client: &C,
    resource: &str,
    token: i64,
) -> Result<(), Error> {
    run(
        client,
        statements::FENCE_CHECK,
        &[(&resource, Type::TEXT), (&token, Type::INT8)],
    )
    .await
}
