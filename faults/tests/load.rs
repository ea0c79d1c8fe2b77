//! Mutual exclusion under load: 16 connections x 2,000 acquisitions over 4 hot keys, each
//! guarding a read-increment-write of a counter row.

use fenced_lock_faults::{report, Lcg, Server, DATABASE};
use std::collections::{HashMap, HashSet};
use std::thread;

const CONNECTIONS: usize = 16;
const ACQUISITIONS: usize = 2_000;
const KEYS: i32 = 4;

#[test]
fn mutual_exclusion_under_load() {
    let server = Server::fresh("load", &["max_connections=40"]);
    server.create_database();
    server
        .connect(DATABASE)
        .batch_execute(
            "CREATE TABLE counters (key int PRIMARY KEY, value bigint NOT NULL);
             INSERT INTO counters SELECT k, 0 FROM generate_series(0, 3) k;
             CREATE TABLE grant_log (seq bigserial PRIMARY KEY, key int NOT NULL,
                                     token bigint NOT NULL);",
        )
        .unwrap();

    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|worker| {
            let mut client = server.connect(DATABASE);
            thread::spawn(move || {
                let mut rng = Lcg::new(worker as u64);
                let mut committed: HashMap<i32, u64> = HashMap::new();
                for _ in 0..ACQUISITIONS {
                    let key = rng.below(KEYS as u64) as i32;
                    let mut tx = client.transaction().unwrap();
                    let token: i64 = tx
                        .query_one("SELECT acquire_fenced(1001, $1)", &[&key])
                        .unwrap()
                        .get(0);
                    // A read-increment-write that only the lock keeps correct.
                    let value: i64 = tx
                        .query_one("SELECT value FROM counters WHERE key = $1", &[&key])
                        .unwrap()
                        .get(0);
                    tx.execute(
                        "UPDATE counters SET value = $2 WHERE key = $1",
                        &[&key, &(value + 1)],
                    )
                    .unwrap();
                    // The log's sequence is drawn under the lock: commit order per key.
                    tx.execute(
                        "INSERT INTO grant_log (key, token) VALUES ($1, $2)",
                        &[&key, &token],
                    )
                    .unwrap();
                    tx.commit().unwrap();
                    *committed.entry(key).or_default() += 1;
                }
                committed
            })
        })
        .collect();

    let mut committed: HashMap<i32, u64> = HashMap::new();
    for worker in workers {
        for (key, count) in worker.join().unwrap() {
            *committed.entry(key).or_default() += count;
        }
    }

    let mut client = server.connect(DATABASE);
    let mut violations = 0;
    for row in client
        .query("SELECT key, value FROM counters", &[])
        .unwrap()
    {
        let (key, value): (i32, i64) = (row.get(0), row.get(1));
        if value as u64 != committed.get(&key).copied().unwrap_or(0) {
            violations += 1;
        }
    }
    let log: Vec<(i32, i64)> = client
        .query("SELECT key, token FROM grant_log ORDER BY seq", &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let mut seen = HashSet::new();
    let mut last_per_key: HashMap<i32, i64> = HashMap::new();
    for &(key, token) in &log {
        let rises = last_per_key
            .insert(key, token)
            .is_none_or(|last| token > last);
        if !seen.insert(token) || !rises {
            violations += 1;
        }
    }
    let operations = (CONNECTIONS * ACQUISITIONS) as u64;
    report(
        "mutual exclusion under load",
        operations,
        0,
        log.len(),
        violations,
    );
    assert_eq!(log.len() as u64, operations);
    assert_eq!(violations, 0);
}
