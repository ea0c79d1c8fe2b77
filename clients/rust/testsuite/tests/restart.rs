//! The server restarted under a holder (the last test binary: it ends every session).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fenced_lock::{acquire_lease, fenced_update, try_acquire_lease, ErrorKind, LeaseOptions};
use fenced_lock_testsuite::*;
use tokio_postgres::NoTls;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restarted() {
    // Its lease's session is gone, so the holder is told (a connection lost is a lease lost,
    // never re-taken with a new token), and once the ttl has passed a successor gets a larger
    // token.
    let (id, row) = (new_id(), doc_id().await);
    let reasons = Arc::new(Mutex::new(Vec::<String>::new()));
    let heard = Arc::clone(&reasons);
    let options = LeaseOptions::new(Duration::from_secs(3))
        .on_lost(move |r| heard.lock().unwrap().push(r.to_owned()));
    let lease = acquire_lease(&config("direct"), NoTls, NS, id, options)
        .await
        .unwrap();
    let pg = format!("{}/pg.sh", std::env::var("CLIENTS_SCRIPTS").unwrap());
    let directory = std::env::var("CLIENTS_SERVER_DIR").unwrap();
    let start_options = std::env::var("CLIENTS_SERVER_OPTIONS").unwrap();
    let stop = std::process::Command::new(&pg)
        .args(["stop", &directory])
        .status()
        .unwrap();
    let start = std::process::Command::new(&pg)
        .args(["start", &directory])
        .args(start_options.split_whitespace())
        .status()
        .unwrap();
    assert!(stop.success() && start.success());
    assert!(cancelled_within(&lease.lost_signal(), Duration::from_secs(3)).await);
    assert!(
        reasons.lock().unwrap()[0].contains("connection"),
        "{reasons:?}"
    );
    assert_eq!(lease.check().unwrap_err().kind(), ErrorKind::LeaseLost);
    let token = lease.token();
    assert!(!lease.release().await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut successor = None;
    while successor.is_none() && Instant::now() < deadline {
        let options = LeaseOptions::new(Duration::from_secs(5));
        successor = try_acquire_lease(&config("direct"), NoTls, NS, id, options)
            .await
            .ok()
            .flatten();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let successor = successor.expect("a successor within the ttl");
    assert!(successor.token() > token);
    let changes = serde_json::json!({"body": "after restart"});
    fenced_update(
        &connect("direct").await,
        "documents",
        row,
        successor.token(),
        &changes,
    )
    .await
    .unwrap();
    assert_eq!(body(row).await.as_deref(), Some("after restart"));
    successor.release().await.unwrap();
}
