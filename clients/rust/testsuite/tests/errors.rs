//! Typed errors from the SQLSTATEs the server raises, and the library's own refusals.

use std::time::Duration;

use fenced_lock::{acquire, acquire_lease, fence_check, AcquireOptions, ErrorKind, LeaseOptions};
use fenced_lock_testsuite::*;
use tokio_postgres::NoTls;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_transaction() {
    let mut client = connect("direct").await;
    let tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .await
        .unwrap();
    let error = acquire(&tx, NS, new_id(), AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        (error.kind(), error.sqlstate()),
        (ErrorKind::ReadOnly, Some("25006"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlock_is_retryable() {
    let id = new_id();
    let (mut a, mut b) = (connect("direct").await, connect("direct").await);
    let (tx_a, tx_b) = (
        a.transaction().await.unwrap(),
        b.transaction().await.unwrap(),
    );
    acquire(&tx_a, NS, id, AcquireOptions::default())
        .await
        .unwrap();
    acquire(&tx_b, NS, id + 1, AcquireOptions::default())
        .await
        .unwrap();
    let (first, second) = tokio::join!(
        acquire(&tx_a, NS, id + 1, AcquireOptions::default()),
        acquire(&tx_b, NS, id, AcquireOptions::default())
    );
    let errors: Vec<_> = [first, second]
        .into_iter()
        .filter_map(Result::err)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        (errors[0].kind(), errors[0].sqlstate()),
        (ErrorKind::Retryable, Some("40P01"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backend_is_connection_lost() {
    let id = new_id();
    let mut client = connect("direct").await;
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = client.transaction().await.unwrap();
    acquire(&tx, NS, id, AcquireOptions::default())
        .await
        .unwrap();
    let _: bool = value("SELECT pg_terminate_backend($1)", &[&pid]).await;
    let error = acquire(&tx, NS, id + 1, AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConnectionLost, "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_token_and_unmapped_errors() {
    let client = connect("direct").await;
    fence_check(&client, "rust-errors-resource", 10)
        .await
        .unwrap();
    let error = fence_check(&client, "rust-errors-resource", 5)
        .await
        .unwrap_err();
    let stale = error.stale().unwrap();
    assert_eq!((stale.offered, stale.accepted), (Some(5), 10));
    assert!(error.hint().is_some() && error.detail().is_some());
    let source = std::error::Error::source(&error).unwrap();
    assert!(source.is::<tokio_postgres::Error>());
    // An error of no kind is Other, with the server's SQLSTATE.
    let error: fenced_lock::Error = client
        .query_one("SELECT no_such_function()", &[])
        .await
        .unwrap_err()
        .into();
    assert_eq!(
        (error.kind(), error.sqlstate()),
        (ErrorKind::Other, Some("42883"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_timeout_is_busy() {
    let id = new_id();
    let (mut a, mut b) = (connect("direct").await, connect("direct").await);
    let tx = a.transaction().await.unwrap();
    acquire(&tx, NS, id, AcquireOptions::default())
        .await
        .unwrap();
    let other = b.transaction().await.unwrap();
    other
        .batch_execute("SET LOCAL lock_timeout = '100ms'")
        .await
        .unwrap();
    let error = acquire(&other, NS, id, AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::LockBusy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_durations_are_refused_before_anything_is_sent() {
    let nowhere: tokio_postgres::Config = "host=/nonexistent-fenced-lock-socket-dir user=postgres"
        .parse()
        .unwrap();
    for options in [
        LeaseOptions::new(Duration::ZERO),
        LeaseOptions::new(Duration::from_secs(3)).margin(Duration::from_secs(1)),
    ] {
        let error = acquire_lease(&nowhere, NoTls, NS, 1, options)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_connection_lost() {
    let nowhere: tokio_postgres::Config = "host=/nonexistent-fenced-lock-socket-dir user=postgres"
        .parse()
        .unwrap();
    let options = LeaseOptions::new(Duration::from_secs(3));
    let error = acquire_lease(&nowhere, NoTls, NS, new_id(), options)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConnectionLost, "{error:?}");
}
