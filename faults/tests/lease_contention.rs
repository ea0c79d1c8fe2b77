//! Leases under contention: 8 connections take and release leases on 2 hot keys as fast as
//! they can, each call in its own transaction; a connection that found the lease held
//! releases it with a token it never had (as `make bench`'s lease cycle does, with 0). Neither
//! the look nor the wrong release may stand in the holder's way: every holder's release
//! succeeds, never 55P03 ("could not obtain lock on row"), and every wrong release returns
//! false. Before 0.3.0's fixes, a look that raced a takeover kept the row locked until its
//! transaction ended (PostgreSQL keeps the lock of a row that fails the recheck after a
//! concurrent update), and so did a release with the wrong token (it locked the key's row
//! before comparing tokens): the holder's release in between failed, and the lease stayed
//! held until its TTL.

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
