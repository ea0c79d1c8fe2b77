//! Leases under contention: 8 connections take and release leases on 2 hot keys as fast as
//! they can, each call in its own transaction. A contender that only looked at a lease (and
//! found it held) must leave nothing behind: every holder's release succeeds, never 55P03
//! ("could not obtain lock on row"). Before 0.3.0's fix a look that raced a takeover kept the
//! row locked until its transaction ended (PostgreSQL keeps the lock of a row that fails the
//! recheck after a concurrent update), and the holder's release then failed, leaving the
//! lease held until its TTL.

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
                    let Some(token) = token else { continue };
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
        "{} of {taken} releases failed, first: {}",
        failures.len(),
        failures[0]
    );
}
