//! The conformance scenarios (clients/conformance.md), directly and through PgBouncer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fenced_lock::{
    acquire, acquire_lease, fence_check, fenced_update, try_acquire, try_acquire_lease,
    AcquireOptions, ErrorKind, LeaderElection, LeaseOptions, LOST_NOT_HELD,
};
use fenced_lock_testsuite::*;
use serde_json::json;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

fn ttl(ms: u64) -> LeaseOptions {
    LeaseOptions::new(Duration::from_millis(ms))
}

async fn transaction_lock_take(route: &str) {
    let id = new_id();
    let (mut a, mut b) = (connect(route).await, connect(route).await);
    let tx = a.transaction().await.unwrap();
    let token = acquire(&tx, NS, id, AcquireOptions::default())
        .await
        .unwrap();
    assert!(token > 0);
    let current: i64 = tx
        .query_one("SELECT current_fence($1::int4, $2::int4)", &[&NS, &id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(current, token);
    {
        let other = b.transaction().await.unwrap();
        assert_eq!(try_acquire(&other, NS, id, false).await.unwrap(), None);
    }
    tx.commit().await.unwrap();
    let other = b.transaction().await.unwrap();
    let options = AcquireOptions {
        timeout: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    assert!(acquire(&other, NS, id, options).await.unwrap() > token);
}

async fn outside_a_transaction(route: &str) {
    // The type system keeps `acquire` inside a transaction; the server's own refusal of a bare
    // call maps to the same kind.
    let id = new_id();
    let client = connect(route).await;
    let error: fenced_lock::Error = client
        .query_one("SELECT acquire_fenced($1::int4, $2::int4)", &[&NS, &id])
        .await
        .unwrap_err()
        .into();
    assert_eq!(error.kind(), ErrorKind::NotInTransaction);
    assert_eq!(error.sqlstate(), Some("25P01"));
}

async fn busy(route: &str) {
    let id = new_id();
    let (mut a, mut b) = (connect(route).await, connect(route).await);
    let tx = a.transaction().await.unwrap();
    acquire(&tx, NS, id, AcquireOptions::default())
        .await
        .unwrap();
    let other = b.transaction().await.unwrap();
    let options = AcquireOptions {
        timeout: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let error = acquire(&other, NS, id, options).await.unwrap_err();
    assert_eq!(
        (error.kind(), error.sqlstate()),
        (ErrorKind::LockBusy, Some("55P03"))
    );
    drop(other);
    drop(tx);
    let held = acquire_lease(&config(route), NoTls, NS, id, ttl(5000))
        .await
        .unwrap();
    assert!(try_acquire_lease(&config(route), NoTls, NS, id, ttl(5000))
        .await
        .unwrap()
        .is_none());
    let error = acquire_lease(&config(route), NoTls, NS, id, ttl(5000))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::LockBusy);
    assert!(held.release().await.unwrap());
}

async fn lease_take_renew_release(route: &str) {
    let id = new_id();
    let lease = acquire_lease(&config(route), NoTls, NS, id, ttl(1200))
        .await
        .unwrap();
    let signal = lease.lost_signal();
    assert!(lease.token() > 0 && !lease.is_lost());
    // Three times its ttl: only the renewer keeps it.
    tokio::time::sleep(Duration::from_millis(3600)).await;
    lease.check().unwrap();
    assert_eq!(
        lease_row(id).await,
        Some((lease.token(), lease.owner().to_owned(), true))
    );
    assert!(lease.valid_for() > Duration::ZERO && lease.valid_for() <= Duration::from_millis(1200));
    assert!(lease.release().await.unwrap());
    assert!(signal.is_cancelled());
    assert_eq!(lease_row(id).await, None);
}

async fn lease_wait_with_timeout(route: &str) {
    let id = new_id();
    let held = acquire_lease(&config(route), NoTls, NS, id, ttl(10000))
        .await
        .unwrap();
    let held_token = held.token();
    let started = Instant::now();
    let waited = ttl(5000).wait(Duration::from_millis(500));
    assert!(try_acquire_lease(&config(route), NoTls, NS, id, waited)
        .await
        .unwrap()
        .is_none());
    assert!(
        (450..3000).contains(&started.elapsed().as_millis()),
        "{:?}",
        started.elapsed()
    );
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
    });
    let started = Instant::now();
    let next = acquire_lease(
        &config(route),
        NoTls,
        NS,
        id,
        ttl(5000).wait(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    // Woken at the release's commit, not at the end of the wait or the ttl.
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(next.token() > held_token);
    next.release().await.unwrap();
}

async fn stale_write_refused(route: &str) {
    let (id, row) = (new_id(), doc_id().await);
    let first = acquire_lease(&config(route), NoTls, NS, id, ttl(5000))
        .await
        .unwrap();
    let first_token = first.token();
    first.release().await.unwrap();
    let second = acquire_lease(&config(route), NoTls, NS, id, ttl(5000))
        .await
        .unwrap();
    assert!(second.token() > first_token);
    let client = connect(route).await;
    fenced_update(
        &client,
        "documents",
        row,
        second.token(),
        &json!({"body": "second"}),
    )
    .await
    .unwrap();
    let error = fenced_update(
        &client,
        "documents",
        row,
        first_token,
        &json!({"body": "first"}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        (error.kind(), error.sqlstate()),
        (ErrorKind::StaleToken, Some("SF001"))
    );
    let stale = error.stale().unwrap();
    assert_eq!(
        (stale.offered, stale.accepted),
        (Some(first_token), second.token())
    );
    assert_eq!(body(row).await.as_deref(), Some("second"));
    let resource = format!("rust-resource-{id}");
    fence_check(&client, &resource, second.token())
        .await
        .unwrap();
    let error = fence_check(&client, &resource, first_token)
        .await
        .unwrap_err();
    let stale = error.stale().unwrap();
    assert_eq!(
        (stale.accepted, stale.resource.as_str()),
        (second.token(), resource.as_str())
    );
    second.release().await.unwrap();
}

async fn owner_rule(route: &str) {
    let id = new_id();
    let lease = acquire_lease(&config(route), NoTls, NS, id, ttl(1500).owner("worker-a"))
        .await
        .unwrap();
    let other = ttl(5000).owner("worker-b");
    assert!(try_acquire_lease(&config(route), NoTls, NS, id, other)
        .await
        .unwrap()
        .is_none());
    // The same owner again (another process of it, behind a pooler): the same lease and token,
    // not a new one; its release ends the lease for both handles.
    let again = acquire_lease(&config(route), NoTls, NS, id, ttl(5000).owner("worker-a"))
        .await
        .unwrap();
    assert_eq!(again.token(), lease.token());
    assert!(again.release().await.unwrap());
    assert!(cancelled_within(&lease.lost_signal(), Duration::from_millis(1500)).await);
    assert_eq!(lease.lost_reason().as_deref(), Some(LOST_NOT_HELD));
    let lease_token = lease.token();
    assert!(!lease.release().await.unwrap());
    let other = acquire_lease(&config(route), NoTls, NS, id, ttl(5000).owner("worker-b"))
        .await
        .unwrap();
    assert!(other.token() > lease_token);
    // Owners the library makes differ from call to call.
    assert!(try_acquire_lease(&config(route), NoTls, NS, id, ttl(5000))
        .await
        .unwrap()
        .is_none());
    other.release().await.unwrap();
}

async fn leader_handover(route: &str) {
    let id = new_id();
    let terms = Arc::new(Mutex::new(Vec::<(usize, i64, Instant)>::new()));
    let stopped = Arc::new(Mutex::new(Vec::<usize>::new()));
    let stops = [CancellationToken::new(), CancellationToken::new()];
    let mut runs = Vec::new();
    for (candidate, stop) in stops.iter().enumerate() {
        let (terms, stop, config) = (Arc::clone(&terms), stop.clone(), config(route));
        let stopped = Arc::clone(&stopped);
        runs.push(tokio::spawn(async move {
            LeaderElection::new(config, NS, id)
                .ttl(Duration::from_secs(2))
                .retry_period(Duration::from_secs(1))
                .run(
                    NoTls,
                    stop,
                    |term, ended| {
                        terms
                            .lock()
                            .unwrap()
                            .push((candidate, term, Instant::now()));
                        async move { ended.cancelled().await }
                    },
                    || stopped.lock().unwrap().push(candidate),
                )
                .await
                .unwrap()
        }));
    }
    let count = || terms.lock().unwrap().len();
    assert!(wait_until(Duration::from_secs(5), || async { count() == 1 }).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(count(), 1, "one leader at a time");
    let (leader, term, _) = terms.lock().unwrap()[0];
    let stopped_at = Instant::now();
    stops[leader].cancel();
    assert!(wait_until(Duration::from_secs(5), || async { count() == 2 }).await);
    let (follower, next_term, at) = terms.lock().unwrap()[1];
    assert!(follower != leader && next_term > term);
    // The stopped leader is told its term ended (after its release); the follower leads on.
    let told = || stopped.lock().unwrap().len() == 1;
    assert!(wait_until(Duration::from_secs(2), || async { told() }).await);
    assert_eq!(*stopped.lock().unwrap(), vec![leader]);
    // Handed over at the release, well within the ttl.
    assert!(
        at - stopped_at < Duration::from_millis(1500),
        "{:?}",
        at - stopped_at
    );
    stops[follower].cancel();
    for run in runs {
        run.await.unwrap();
    }
    assert_eq!(*stopped.lock().unwrap(), vec![leader, follower]);
}

async fn lost_when_no_longer_held(route: &str) {
    let id = new_id();
    let reasons = Arc::new(Mutex::new(Vec::<String>::new()));
    let heard = Arc::clone(&reasons);
    let options = ttl(1500).on_lost(move |reason| heard.lock().unwrap().push(reason.to_owned()));
    let lease = acquire_lease(&config(route), NoTls, NS, id, options)
        .await
        .unwrap();
    let released: bool = value(
        "SELECT release_lease($1::int4, $2::int4, $3::int8)",
        &[&NS, &id, &lease.token()],
    )
    .await;
    assert!(released);
    let successor = acquire_lease(&config(route), NoTls, NS, id, ttl(5000))
        .await
        .unwrap();
    // Told at its next renewal, within a third of the ttl.
    assert!(cancelled_within(&lease.lost_signal(), Duration::from_millis(1500)).await);
    assert_eq!(*reasons.lock().unwrap(), vec![LOST_NOT_HELD.to_owned()]);
    assert_eq!(lease.check().unwrap_err().kind(), ErrorKind::LeaseLost);
    assert!(!lease.release().await.unwrap());
    assert_eq!(
        lease_row(id).await.map(|row| row.0),
        Some(successor.token())
    );
    successor.release().await.unwrap();
    assert!(
        wait_until(Duration::from_secs(1), || async {
            lease_row(id).await.is_none()
        })
        .await
    );
}

macro_rules! scenarios {
    ($($name:ident),*) => {
        mod direct { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name("direct").await } )* }
        mod pooled { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name("pooled").await } )* }
    };
}

scenarios!(
    transaction_lock_take,
    outside_a_transaction,
    busy,
    lease_take_renew_release,
    lease_wait_with_timeout,
    stale_write_refused,
    owner_rule,
    leader_handover,
    lost_when_no_longer_held
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_prepared_statements() {
    // Behind a transaction-mode pooler a named statement may be missing on the next server
    // connection: the library prepares none (tokio-postgres' `query` would).
    let (id, row) = (new_id(), doc_id().await);
    let mut client = connect("direct").await;
    for _ in 0..8 {
        let tx = client.transaction().await.unwrap();
        let token = acquire(&tx, NS, id, AcquireOptions::default())
            .await
            .unwrap();
        fenced_update(&tx, "documents", row, token, &json!({"body": "x"}))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let rows = client
        .simple_query("SELECT count(*) FROM pg_prepared_statements")
        .await
        .unwrap();
    let count = rows.iter().find_map(|message| match message {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    });
    assert_eq!(count.as_deref(), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_unreleased_is_released() {
    let id = new_id();
    let lease = acquire_lease(&config("direct"), NoTls, NS, id, ttl(3000))
        .await
        .unwrap();
    let signal = lease.lost_signal();
    assert!(lease.lost_reason().is_none());
    // Dropped: released in the background, at once (not at the end of its ttl).
    drop(lease);
    assert!(cancelled_within(&signal, Duration::from_secs(2)).await);
    assert!(
        wait_until(Duration::from_secs(2), || async {
            lease_row(id).await.is_none()
        })
        .await
    );
}
