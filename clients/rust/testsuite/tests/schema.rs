//! The extension in a schema of its own (CREATE EXTENSION fenced_lock SCHEMA fenced), found
//! through the connection's search_path: a lock, a guarded write, a lease.

use std::time::Duration;

use fenced_lock::{acquire, acquire_lease, fenced_update, AcquireOptions, ErrorKind, LeaseOptions};
use serde_json::json;
use tokio_postgres::{Config, NoTls};

fn schema_config() -> Config {
    std::env::var("CLIENTS_SCHEMA_DSN")
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn the_library_finds_the_extension_through_search_path() {
    let (mut client, connection) = schema_config().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    let schema: String = client
        .query_one(
            "SELECT extnamespace::regnamespace::text FROM pg_extension \
             WHERE extname = 'fenced_lock'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(schema, "fenced");
    let mut tokens = Vec::new();
    for body in ["first", "second"] {
        let tx = client.transaction().await.unwrap();
        let token = acquire(&tx, 1004, 1, AcquireOptions::default())
            .await
            .unwrap();
        fenced_update(&tx, "documents", 1, token, &json!({ "body": body }))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        tokens.push(token);
    }
    assert!(tokens[1] > tokens[0]);
    let tx = client.transaction().await.unwrap();
    let stale = fenced_update(&tx, "documents", 1, tokens[0], &json!({ "body": "stale" })).await;
    assert_eq!(stale.unwrap_err().kind(), ErrorKind::StaleToken);
    drop(tx);
    let lease = acquire_lease(
        &schema_config(),
        NoTls,
        1004,
        2,
        LeaseOptions::new(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    assert!(lease.token() > tokens[1]);
    assert!(lease.release().await.unwrap());
}
