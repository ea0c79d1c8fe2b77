//! Leases under contention: 8 connections take and release leases on 2 hot keys as fast as
//! they can, each call in its own transaction; a connection that found the lease held
//! releases it with a token it never had (as `make bench`'s lease cycle does, with 0). Neither
//! the look nor the wrong release may stand in the holder's way: every holder's release
//! succeeds, never 55P03 ("could not obtain lock on row"), and every wrong release returns
//! false. Before 0.3.0's fixes, a look that raced a takeover kept the row locked until its
//! transaction ended (PostgreSQL keeps the lock of a row that fails the recheck after a
//! concurrent update), and so did a release with the wrong token (it locked the key's row
//! before comparing tokens): the holder's release in between failed, and the lease stayed
//! held until its TTL. And a lease taken after a REPEATABLE READ or SERIALIZABLE
//! transaction's snapshot is a serialization failure (40001) to that transaction's acquire.

use fenced_lock_faults::{Server, DATABASE};
use std::thread;

const CONNECTIONS: usize = 8;
const ATTEMPTS: usize = 1_500;
const KEYS: i32 = 2;

#[test]
fn releases_succeed_while_contenders_look() {
    let server = Server::fresh(
        "lease_contention",
        &["shared_preload_libraries=fenced_lock", "max_connections=30"],
    );
    server.create_database();
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|worker| {
            let mut client = server.connect(DATABASE);
            thread::spawn(move || {
                let owner = format!("worker-{worker}");
                let (mut taken, mut failures) = (0, Vec::new());
                for attempt in 0..ATTEMPTS {
                    let key = (attempt as i32 + worker as i32) % KEYS;
                    let token: Option<i64> = client
                        .query_one(
                            "SELECT acquire_lease(7800, $1, $2, '30 seconds')",
                            &[&key, &owner],
                        )
                        .unwrap()
                        .get(0);
                    let Some(token) = token else {
                        match client.query_one("SELECT release_lease(7800, $1, 0)", &[&key]) {
                            Ok(row) if !row.get::<_, bool>(0) => {}
                            Ok(_) => failures.push("a release with token 0 returned true".into()),
                            Err(error) => failures.push(format!(
                                "release with token 0: {:?}",
                                error.as_db_error().map(|e| (e.code().code(), e.message()))
                            )),
                        }
                        continue;
                    };
                    taken += 1;
                    match client.query_one("SELECT release_lease(7800, $1, $2)", &[&key, &token]) {
                        Ok(row) if row.get::<_, bool>(0) => {}
                        Ok(_) => failures.push(format!("release of {token} returned false")),
                        Err(error) => failures.push(format!(
                            "release of {token}: {:?}",
                            error.as_db_error().map(|e| (e.code().code(), e.message()))
                        )),
                    }
                }
                (taken, failures)
            })
        })
        .collect();
    let mut taken = 0;
    let mut failures = Vec::new();
    for worker in workers {
        let (worker_taken, worker_failures) = worker.join().unwrap();
        taken += worker_taken;
        failures.extend(worker_failures);
    }
    println!(
        "lease contention: {taken} leases taken and released by {CONNECTIONS} connections on {KEYS} keys, {} failed releases",
        failures.len()
    );
    assert!(taken > CONNECTIONS * 10, "only {taken} leases were taken");
    assert!(
        failures.is_empty(),
        "{} releases failed ({taken} leases taken), first: {}",
        failures.len(),
        failures[0]
    );
}

/// An acquire in a transaction that reads one snapshot (REPEATABLE READ, SERIALIZABLE) cannot
/// look again at a lease that another transaction took after that snapshot: it raises 40001
/// (serialization_failure, which drivers and retry loops know to retry), never NULL, which
/// would say "busy" about a row the transaction cannot see. READ COMMITTED looks again and
/// says busy. Both kinds of change: a takeover of an expired row, and a first lease of a key
/// that had no row when the snapshot was taken.
#[test]
fn a_lease_taken_after_the_snapshot_is_a_serialization_failure() {
    let server = Server::fresh("lease_snapshot", &["shared_preload_libraries=fenced_lock"]);
    server.create_database();
    let mut looker = server.connect(DATABASE);
    let mut taker = server.connect(DATABASE);
    let levels = ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"];
    for (n, level) in levels.iter().enumerate() {
        for first_lease in [false, true] {
            let id = (n * 2 + first_lease as usize) as i32;
            if !first_lease {
                // An expired lease of another owner: free to take, for whoever comes first.
                taker
                    .execute(
                        "SELECT acquire_lease(7801, $1, 'old', '1 microsecond')",
                        &[&id],
                    )
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            looker
                .batch_execute(&format!("BEGIN ISOLATION LEVEL {level}; SELECT 1"))
                .unwrap();
            let taken: Option<i64> = taker
                .query_one("SELECT acquire_lease(7801, $1, 'taker', '1 hour')", &[&id])
                .unwrap()
                .get(0);
            assert!(taken.is_some(), "{level}: the taker did not get lease {id}");
            let outcome =
                looker.query_one("SELECT acquire_lease(7801, $1, 'looker', '1 hour')", &[&id]);
            let case = format!(
                "{level}, {}",
                if first_lease {
                    "first lease"
                } else {
                    "takeover"
                }
            );
            match (*level, outcome) {
                ("READ COMMITTED", Ok(row)) => assert_eq!(
                    row.get::<_, Option<i64>>(0),
                    None,
                    "{case}: the lease is the taker's, so busy"
                ),
                ("READ COMMITTED", Err(error)) => panic!("{case}: {error:?}"),
                (_, Ok(row)) => panic!(
                    "{case}: returned {:?} instead of raising 40001",
                    row.get::<_, Option<i64>>(0)
                ),
                (_, Err(error)) => {
                    let error = error.as_db_error().expect("a server error");
                    assert_eq!(error.code().code(), "40001", "{case}: {}", error.message());
                }
            }
            looker.batch_execute("ROLLBACK").unwrap();
            // The retry a driver would make, in a new transaction: busy, and the lease
            // still the taker's.
            looker
                .batch_execute(&format!("BEGIN ISOLATION LEVEL {level}"))
                .unwrap();
            let retried: Option<i64> = looker
                .query_one("SELECT acquire_lease(7801, $1, 'looker', '1 hour')", &[&id])
                .unwrap()
                .get(0);
            looker.batch_execute("COMMIT").unwrap();
            assert_eq!(retried, None, "{case}: the retry found the lease busy");
            let owner: String = taker
                .query_one(
                    "SELECT owner FROM fenced_leases WHERE ns = 7801 AND id = $1",
                    &[&id],
                )
                .unwrap()
                .get(0);
            assert_eq!(owner, "taker", "{case}");
        }
    }
}
