//! Leases under contention: 8 connections take and release leases on 2 hot keys as fast as
//! they can, each call in its own transaction; a connection that found the lease held
//! releases it with a token it never had (as `make bench`'s lease cycle does, with 0). Neither
//! the look nor the wrong release may stand in the holder's way: every holder's release
//! succeeds, never 55P03 (the row being written by another transaction), and every wrong release returns
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
                            "SELECT try_acquire_lease(7800, $1, $2, '30 seconds')",
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

/// A lease call in a transaction that reads one snapshot (REPEATABLE READ, SERIALIZABLE)
/// cannot look again at a lease that another transaction took after that snapshot: it raises
/// 40001 (serialization_failure, which drivers and retry loops know to retry), never NULL or
/// false, which would say "busy" or "lost" about a row the transaction cannot see. READ
/// COMMITTED looks again: busy, or lost. Each call: an acquire after a takeover of an expired
/// lease and after a first lease of a key that had no row at the snapshot; the old holder's
/// renew and release after a takeover.
#[test]
fn a_lease_taken_after_the_snapshot_is_a_serialization_failure() {
    let server = Server::fresh("lease_snapshot", &["shared_preload_libraries=fenced_lock"]);
    server.create_database();
    let mut looker = server.connect(DATABASE);
    let mut taker = server.connect(DATABASE);
    // The call, whether the key has a row before the snapshot, and what READ COMMITTED returns.
    let calls = [
        (
            "try_acquire_lease($1, 'looker', '1 hour') IS NULL",
            true,
            "busy",
        ),
        (
            "try_acquire_lease($1, 'looker', '1 hour') IS NULL",
            false,
            "busy",
        ),
        ("renew_lease($1, $2, '1 hour') IS NULL", true, "lost"),
        ("NOT release_lease($1, $2)", true, "lost"),
    ];
    let mut id = 0;
    for level in ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"] {
        for (call, row_before, answer) in calls {
            id += 1;
            let sql = format!("SELECT {}", call.replace("($1", "(7801, $1"));
            // An expired lease of another owner: free to take, for whoever comes first.
            let old_token = match row_before {
                true => taker
                    .query_one(
                        "SELECT try_acquire_lease(7801, $1, 'old', '1 microsecond')",
                        &[&id],
                    )
                    .unwrap()
                    .get::<_, i64>(0),
                false => 0,
            };
            std::thread::sleep(std::time::Duration::from_millis(2));
            let case = format!("{level}, {sql}, row before the snapshot: {row_before}");
            looker
                .batch_execute(&format!("BEGIN ISOLATION LEVEL {level}; SELECT 1"))
                .unwrap();
            let taken: Option<i64> = taker
                .query_one(
                    "SELECT try_acquire_lease(7801, $1, 'taker', '1 hour')",
                    &[&id],
                )
                .unwrap()
                .get(0);
            assert!(taken.is_some(), "{case}: the taker did not get the lease");
            let parameters: Vec<&(dyn postgres::types::ToSql + Sync)> = match call.contains("$2") {
                true => vec![&id, &old_token],
                false => vec![&id],
            };
            match (level, looker.query_one(&sql, &parameters)) {
                ("READ COMMITTED", Ok(row)) => {
                    assert!(row.get::<_, bool>(0), "{case}: not {answer}")
                }
                ("READ COMMITTED", Err(error)) => panic!("{case}: {error:?}"),
                (_, Ok(row)) => panic!(
                    "{case}: returned {} instead of raising 40001",
                    row.get::<_, bool>(0)
                ),
                (_, Err(error)) => {
                    let error = error.as_db_error().expect("a server error");
                    assert_eq!(error.code().code(), "40001", "{case}: {}", error.message());
                }
            }
            looker.batch_execute("ROLLBACK").unwrap();
            // The retry a driver would make, in a new transaction: busy or lost, and the
            // lease still the taker's.
            looker
                .batch_execute(&format!("BEGIN ISOLATION LEVEL {level}"))
                .unwrap();
            let retried: bool = looker.query_one(&sql, &parameters).unwrap().get(0);
            looker.batch_execute("COMMIT").unwrap();
            assert!(retried, "{case}: the retry did not find the lease {answer}");
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

/// A release by a holder that lost the lease while its statement ran must leave the new
/// holder's row unlocked. One connection takes the lease over and over (each take a new token,
/// with a TTL of a microsecond); another reads the current token and releases it inside a
/// transaction it keeps open a moment. When a takeover commits between the release's snapshot
/// and its row lock, `FOR UPDATE` in the release would lock the new version, find its token
/// different and return false, but keep the lock until the transaction ends (PostgreSQL's
/// rule for a row that fails the recheck): the new holder's renewal would fail with 55P03
/// meanwhile. The row's xmax tells whether the releasing transaction holds it.
#[test]
fn a_lost_release_leaves_the_new_holder_unlocked() {
    const RELEASES: usize = 3_000;
    let server = Server::fresh(
        "lease_lost_release",
        &["shared_preload_libraries=fenced_lock"],
    );
    server.create_database();
    let mut taker = server.connect(DATABASE);
    taker
        .execute(
            "SELECT try_acquire_lease(7802, 1, 'taker', '1 microsecond')",
            &[],
        )
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let taking = {
        let done = done.clone();
        thread::spawn(move || {
            let mut takes = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                taker
                    .execute(
                        "SELECT try_acquire_lease(7802, 1, 'taker', '1 microsecond')",
                        &[],
                    )
                    .unwrap();
                takes += 1;
            }
            takes
        })
    };
    let mut releaser = server.connect(DATABASE);
    let (mut lost, mut left_locked) = (0, 0);
    for _ in 0..RELEASES {
        // The token the lease is held with now; none just after a release, until the taker
        // takes the key again.
        let Some(token) = releaser
            .query_opt(
                "SELECT token FROM fenced_leases WHERE ns = 7802 AND id = 1",
                &[],
            )
            .unwrap()
            .map(|row| row.get::<_, i64>(0))
        else {
            continue;
        };
        let mut transaction = releaser.transaction().unwrap();
        let released: bool =
            match transaction.query_one("SELECT release_lease(7802, 1, $1)", &[&token]) {
                Ok(row) => row.get(0),
                // The taker's open transaction was writing the row: not this test's case.
                Err(error) if error.code().map(|code| code.code()) == Some("55P03") => continue,
                Err(error) => panic!("release of {token}: {error:?}"),
            };
        if !released {
            lost += 1;
            let locked: bool = transaction
                .query_one(
                    "SELECT xmax::text::bigint \
                            = pg_current_xact_id_if_assigned()::text::bigint % 4294967296 \
                       FROM fenced_lease_state WHERE ns = 7802 AND id = 1",
                    &[],
                )
                .unwrap()
                .get::<_, Option<bool>>(0)
                .unwrap_or(false);
            left_locked += locked as usize;
        }
        transaction.commit().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let takes = taking.join().unwrap();
    println!(
        "lost release: {takes} takeovers, {RELEASES} releases, {lost} lost, {left_locked} left the new holder's row locked"
    );
    assert!(lost > 100, "only {lost} releases raced a takeover");
    assert_eq!(
        left_locked, 0,
        "releases that lost the lease but kept its row locked"
    );
}

/// The lease functions write the lease table's heap and primary key directly. Connections
/// take, renew, take over and release leases with long owners on many keys at once, so that
/// pages fill and many updates cannot stay on their page (not HOT) and must add index
/// entries; some transactions roll back. amcheck then finds every live row version in the
/// primary key (`heapallindexed`), and every lease through it.
#[test]
fn direct_writes_keep_the_primary_key_whole() {
    const WORKERS: u64 = 4;
    const CALLS: usize = 600;
    const SPREAD: u64 = 300;
    let server = Server::fresh(
        "lease_direct_writes",
        &["shared_preload_libraries=fenced_lock", "autovacuum=off"],
    );
    server.create_database();
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let mut client = server.connect(DATABASE);
            thread::spawn(move || {
                let mut keys = fenced_lock_faults::Lcg::new(worker);
                let owner = format!("{}-{worker}", "o".repeat(200));
                let mut written = 0;
                for call in 0..CALLS {
                    let key = keys.below(SPREAD) as i32;
                    let mut transaction = client.transaction().unwrap();
                    let token: Option<i64> = transaction
                        .query_one(
                            "SELECT try_acquire_lease(7803, $1, $2, '1 second')",
                            &[&key, &owner],
                        )
                        .unwrap()
                        .get(0);
                    if let Some(token) = token {
                        let renewed = "SELECT renew_lease(7803, $1, $2, '1 hour') IS NOT NULL";
                        let row = transaction.query_one(renewed, &[&key, &token]).unwrap();
                        assert!(row.get::<_, bool>(0), "a lease just taken was not renewed");
                        if call % 3 == 0 {
                            let release = "SELECT release_lease(7803, $1, $2)";
                            let row = transaction.query_one(release, &[&key, &token]).unwrap();
                            assert!(row.get::<_, bool>(0), "a lease just taken was not released");
                        }
                        written += 1;
                    }
                    match call % 7 {
                        0 => transaction.rollback().unwrap(),
                        _ => transaction.commit().unwrap(),
                    }
                }
                written
            })
        })
        .collect();
    let written: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let mut checker = server.connect(DATABASE);
    // A backend reports its table counts as it exits: wait until the workers' have.
    let others = "SELECT count(*) FROM pg_stat_activity
                   WHERE datname = current_database() AND pid <> pg_backend_pid()";
    while checker.query_one(others, &[]).unwrap().get::<_, i64>(0) > 0 {
        thread::sleep(std::time::Duration::from_millis(20));
    }
    let moved: i64 = checker
        .query_one(
            "SELECT n_tup_upd - n_tup_hot_upd FROM pg_stat_all_tables
              WHERE relname = 'fenced_lease_state'",
            &[],
        )
        .unwrap()
        .get(0);
    println!("direct writes: {written} leases written, {moved} updates not HOT");
    assert!(
        written > WORKERS * 100,
        "only {written} leases were written"
    );
    assert!(
        moved > 0,
        "no update left its page: the test did not reach non-HOT updates"
    );
    checker.batch_execute("CREATE EXTENSION amcheck").unwrap();
    checker
        .query_one(
            "SELECT bt_index_parent_check('fenced_lease_state_pkey', heapallindexed => true)",
            &[],
        )
        .unwrap();
    let by_scan = lease_count(&mut checker, "SET enable_indexscan = off");
    let by_key = lease_count(
        &mut checker,
        "RESET enable_indexscan; SET enable_seqscan = off",
    );
    assert_eq!(
        by_scan, by_key,
        "a table scan and the key find different rows"
    );
}

/// How many of direct_writes' leases `settings` (which picks the plan) finds.
fn lease_count(client: &mut postgres::Client, settings: &str) -> i64 {
    client
        .batch_execute(&format!("{settings}; SET enable_bitmapscan = off"))
        .unwrap();
    let count = "SELECT count(*) FROM fenced_lease_state WHERE ns = 7803 AND id >= 0";
    client.query_one(count, &[]).unwrap().get(0)
}

/// The sweep deletes released rows as its transaction commits, with no MVCC snapshot holding
/// back pruning: a row it chose could be deleted by another session's sweep, pruned, and its
/// line pointer given to a row still being inserted before the delete came, which then failed
/// the committing call with "attempted to delete invisible tuple" (`make bench`'s lease cycle,
/// 8 clients, hit it once in about four rounds of five seconds). Rows are now deleted while
/// the sweep's scan pins their page, which no pruning or vacuum can then reclaim. Here the
/// bench's cycle (first leases of random keys, released at once, swept and pruned all the
/// time), from backends that come and go: no call fails. The race is rare: 600,000 cycles
/// of the old build did not meet it here, so this guards the sweep under churn rather than
/// replaying that interleaving.
#[test]
fn sweeps_under_churn_fail_no_call() {
    const CYCLES: usize = 4_000;
    const SPREAD: u64 = 1_000_000;
    let server = Server::fresh(
        "lease_sweep_churn",
        &["shared_preload_libraries=fenced_lock"],
    );
    server.create_database();
    let workers: Vec<_> = (0..CONNECTIONS as u64)
        .map(|worker| {
            let url = server.url(DATABASE);
            thread::spawn(move || {
                let mut keys = fenced_lock_faults::Lcg::new(worker + 11);
                let owner = format!("churn-{worker}");
                let (mut failures, mut taken) = (Vec::new(), 0);
                let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                for cycle in 0..CYCLES {
                    // A new backend now and then: each one's first first lease sweeps.
                    if cycle % 500 == 499 {
                        client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                    }
                    let key = keys.below(SPREAD) as i32;
                    let acquired = client.query_one(
                        "SELECT coalesce(try_acquire_lease(7804, $1, $2, '30 seconds'), 0)",
                        &[&key, &owner],
                    );
                    let token: i64 = match acquired {
                        Ok(row) => row.get(0),
                        Err(error) => {
                            failures.push(error.to_string());
                            continue;
                        }
                    };
                    taken += usize::from(token != 0);
                    if let Err(error) =
                        client.query_one("SELECT release_lease(7804, $1, $2)", &[&key, &token])
                    {
                        failures.push(error.to_string());
                    }
                }
                (taken, failures)
            })
        })
        .collect();
    let (mut taken, mut failures) = (0, Vec::new());
    for worker in workers {
        let (worker_taken, worker_failures) = worker.join().unwrap();
        taken += worker_taken;
        failures.extend(worker_failures);
    }
    println!(
        "sweep churn: {taken} leases taken and released by {CONNECTIONS} connections on \
         {SPREAD} keys, {} failed calls",
        failures.len()
    );
    assert!(taken > CYCLES, "the workers took leases ({taken})");
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}
