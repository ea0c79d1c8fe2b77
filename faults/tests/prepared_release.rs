//! A lease released by a prepared transaction (review of 0.2.0, item 12): a waiting acquire
//! notices the release within about a second of COMMIT PREPARED (no broadcast reaches it from
//! the committing session), and the preparing session's next commit wakes nobody by mistake.

use fenced_lock_faults::{Server, DATABASE};
use postgres::{Client, NoTls};
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn a_release_committed_by_commit_prepared_reaches_a_waiter_within_a_second() {
    let server = Server::fresh(
        "prepared-release",
        &[
            "shared_preload_libraries=fenced_lock",
            "max_prepared_transactions=2",
        ],
    );
    server.create_database();
    let mut holder = server.connect(DATABASE);
    let token: i64 = holder
        .query_one("SELECT try_acquire_lease(7701, 1, 'holder', '1 hour')", &[])
        .unwrap()
        .get(0);
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT release_lease(7701, 1, {token}); PREPARE TRANSACTION 'release-7701'"
        ))
        .unwrap();
    // The preparing session commits something else: it must not wake waiters for the
    // prepared release (the lease is still held until COMMIT PREPARED).
    holder.batch_execute("SELECT 1").unwrap();

    let url = server.url(DATABASE);
    let waiter = thread::spawn(move || {
        let mut client = Client::connect(&url, NoTls).unwrap();
        let token: Option<i64> = client
            .query_one(
                "SELECT acquire_lease(7701, 1, 'waiter', '1 minute', timeout => '30 s')",
                &[],
            )
            .unwrap()
            .get(0);
        (token, Instant::now())
    });
    thread::sleep(Duration::from_millis(1500));
    assert!(!waiter.is_finished(), "the waiter took a lease still held");
    let mut other = server.connect(DATABASE);
    other
        .batch_execute("COMMIT PREPARED 'release-7701'")
        .unwrap();
    let committed = Instant::now();
    let (got, woke) = waiter.join().unwrap();
    let after = woke.duration_since(committed);
    println!("waiter got the lease {after:?} after COMMIT PREPARED");
    assert!(got.is_some_and(|t| t > token), "{got:?} after {token}");
    assert!(after < Duration::from_millis(1500), "took {after:?}");
}
