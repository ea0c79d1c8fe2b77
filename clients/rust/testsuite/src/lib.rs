//! What the tests share: the test server and PgBouncer that clients/run.sh started.

use std::time::{Duration, Instant};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls};

/// Keys no other test uses: fresh ids in namespace 7703 (Python 7700, Node.js 7701, Go 7702).
pub const NS: i32 = 7703;

static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// A fresh id for one test.
pub fn new_id() -> i32 {
    let base = 1 + (std::process::id() % 1000) as i32 * 1000;
    base + NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// "host=... user=... dbname=..." from run.sh.
pub fn dsn(route: &str) -> String {
    std::env::var(if route == "pooled" {
        "CLIENTS_POOLED_DSN"
    } else {
        "CLIENTS_DSN"
    })
    .unwrap()
}

pub fn config(route: &str) -> Config {
    dsn(route).parse().unwrap()
}

pub const ROUTES: [&str; 2] = ["direct", "pooled"];

/// A connection with the driver's defaults, driven by a task of its own.
pub async fn connect(route: &str) -> Client {
    let (client, connection) = config(route).connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The first column of the one row `sql` returns, on a direct connection of its own.
pub async fn value<T>(sql: &str, params: &[&(dyn ToSql + Sync)]) -> T
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    connect("direct")
        .await
        .query_one(sql, params)
        .await
        .unwrap()
        .get(0)
}

/// A row of `documents` no other test writes, with no fence yet.
pub async fn doc_id() -> i32 {
    let row = new_id() % 1000 + 1;
    connect("direct")
        .await
        .execute(
            "UPDATE documents SET fence = NULL, body = NULL WHERE id = $1",
            &[&row],
        )
        .await
        .unwrap();
    row
}

pub async fn body(row: i32) -> Option<String> {
    value("SELECT body FROM documents WHERE id = $1", &[&row]).await
}

/// The lease's row in fenced_leases: (token, owner, live), or None.
pub async fn lease_row(id: i32) -> Option<(i64, String, bool)> {
    connect("direct")
        .await
        .query_opt(
            "SELECT token, owner, expires_at > now() FROM fenced_leases \
             WHERE ns = $1 AND id = $2 AND slot = 0",
            &[&NS, &id],
        )
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
}

pub async fn wait_until<F, Fut>(timeout: Duration, mut predicate: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if predicate().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    predicate().await
}

/// True when `signal` is cancelled within `timeout`.
pub async fn cancelled_within(
    signal: &tokio_util::sync::CancellationToken,
    timeout: Duration,
) -> bool {
    tokio::time::timeout(timeout, signal.cancelled())
        .await
        .is_ok()
}
