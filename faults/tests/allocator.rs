//! The shared allocator's block reservations: they wait like locks (asleep, with a wait event,
//! for their own database only), never lose the owner's setval, and wait for a synchronous
//! standby's flush whatever the session's synchronous_commit.

use fenced_lock_faults::{Server, DATABASE};
use postgres::{Client, NoTls};
use std::thread;
use std::time::{Duration, Instant};

const PRELOAD: &str = "shared_preload_libraries=fenced_lock";

/// The wait events of the backends of `database` whose query is `query`.
fn wait_events(admin: &mut Client, database: &str, query: &str) -> Vec<Option<String>> {
    admin
        .query(
            "SELECT wait_event_type FROM pg_stat_activity WHERE datname = $1 AND query = $2",
            &[&database, &query],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Waits until `count` backends of `database` run `query` and wait on a heavyweight lock.
fn until_waiting_on_lock(admin: &mut Client, database: &str, query: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = wait_events(admin, database, query);
        if events.len() == count && events.iter().all(|e| e.as_deref() == Some("Lock")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "expected {count} backends waiting on a lock for {query:?}, saw {events:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// DDL that holds one database's token sequence (an open ALTER SEQUENCE) holds up only that
/// database's reservations, and they wait asleep on the lock (wait event "Lock"), not spinning:
/// another database's first token is drawn meanwhile.
#[test]
fn a_reservation_waits_asleep_and_only_for_its_own_database() {
    let server = Server::fresh("allocator-databases", &[PRELOAD]);
    server.create_database();
    let mut admin = server.connect("postgres");
    admin
        .batch_execute("CREATE DATABASE fenced_faults_other")
        .unwrap();
    server
        .connect("fenced_faults_other")
        .batch_execute("CREATE EXTENSION fenced_lock")
        .unwrap();

    let mut ddl = server.connect(DATABASE);
    ddl.batch_execute("BEGIN; ALTER SEQUENCE fencing_token_seq NO CYCLE")
        .unwrap();
    // Two acquirers of the first database: both need its first block.
    let query = "SELECT acquire_fenced(7001, 1)";
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let url = server.url(DATABASE);
            thread::spawn(move || {
                let mut client = Client::connect(&url, NoTls).unwrap();
                client
                    .batch_execute("SET fenced_lock.outside_transaction = warning")
                    .unwrap();
                client.query_one(query, &[]).unwrap().get::<_, i64>(0)
            })
        })
        .collect();
    until_waiting_on_lock(&mut admin, DATABASE, query, 2);
    // Sampled again a second later: still asleep on the lock, and they used no CPU to speak of.
    thread::sleep(Duration::from_secs(1));
    until_waiting_on_lock(&mut admin, DATABASE, query, 2);

    // The other database reserves its own block meanwhile.
    let mut other = server.connect("fenced_faults_other");
    other
        .batch_execute("SET statement_timeout = '5s'; BEGIN")
        .unwrap();
    let token: i64 = other
        .query_one("SELECT acquire_fenced(7001, 1)", &[])
        .unwrap()
        .get(0);
    assert!(token > 0);
    other.batch_execute("COMMIT").unwrap();

    ddl.batch_execute("COMMIT").unwrap();
    let tokens: Vec<i64> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(tokens.iter().all(|&token| token > 0), "{tokens:?}");
    assert_ne!(tokens[0], tokens[1]);
}

/// The owner's setval forward, concurrent with reservations (a block of 2 tokens, so that
/// nearly every grant reserves): after it returns, every token is above it. Without the
/// sequence's lock around a reservation, a setval landing between the reservation's nextval and
/// setval was overwritten (2 of 2,000 seen).
#[test]
fn the_owners_setval_is_never_lost_to_a_reservation() {
    let server = Server::fresh(
        "allocator-setval",
        &[PRELOAD, "fenced_lock.token_block=2", "max_connections=20"],
    );
    server.create_database();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acquirers: Vec<_> = (0..4)
        .map(|client_id| {
            let (url, stop) = (server.url(DATABASE), stop.clone());
            thread::spawn(move || {
                let mut client = Client::connect(&url, NoTls).unwrap();
                let mut calls = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut tx = client.transaction().unwrap();
                    tx.query_one("SELECT acquire_fenced(7002, $1)", &[&client_id])
                        .unwrap();
                    tx.commit().unwrap();
                    calls += 1;
                }
                calls
            })
        })
        .collect();

    let mut owner = server.connect(DATABASE);
    let mut lost = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut setvals = 0;
    while setvals < 2000 && Instant::now() < deadline {
        let moved_to: i64 = owner
            .query_one(
                "SELECT setval('fencing_token_seq', last_value + 1000) FROM fencing_token_seq",
                &[],
            )
            .unwrap()
            .get(0);
        let mut tx = owner.transaction().unwrap();
        let token: i64 = tx
            .query_one("SELECT acquire_fenced(7002, 99)", &[])
            .unwrap()
            .get(0);
        tx.commit().unwrap();
        if token <= moved_to {
            lost += 1;
        }
        setvals += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls: u64 = acquirers.into_iter().map(|a| a.join().unwrap()).sum();
    println!("owner setvals: {setvals}, lost: {lost}; concurrent grants: {calls}");
    assert!(setvals >= 200, "only {setvals} setvals in 20 s");
    assert!(calls > 0);
    assert_eq!(lost, 0, "{lost} of {setvals} setvals were overwritten");
}

/// With synchronous_commit = remote_apply, a token waits for the synchronous standby's flush
/// (what a failover needs), not for its replay: with replay paused on the standby, the token
/// comes at once. The wait for a flush stopped at the flush, and a check for the replay then
/// failed with a spurious 57014.
#[test]
fn remote_apply_waits_for_the_standbys_flush_only() {
    let primary = Server::fresh("allocator-apply-primary", &[PRELOAD]);
    primary.create_database();
    let standby = Server::standby_of(&primary, "allocator-apply-standby", &[]);
    let mut admin = primary.connect("postgres");
    admin
        .batch_execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin
        .query(
            "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'",
            &[],
        )
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the standby did not become synchronous"
        );
        thread::sleep(Duration::from_millis(100));
    }
    let mut on_standby = standby.connect("postgres");
    // The owner moves the sequence from a session of its own: with remote_apply, its own
    // commit would wait for the paused replay (PostgreSQL's rule for any commit that wrote WAL).
    let mut owner = primary.connect(DATABASE);
    let mut client = primary.connect(DATABASE);
    client
        .batch_execute("BEGIN; SELECT acquire_fenced(7003, 0); COMMIT")
        .unwrap();
    on_standby
        .batch_execute("SELECT pg_wal_replay_pause()")
        .unwrap();
    client
        .batch_execute("SET synchronous_commit = remote_apply; SET statement_timeout = '10s'")
        .unwrap();
    for round in 1..=5 {
        // The owner's setval makes the next grant reserve a block, which the standby must
        // confirm.
        owner
            .batch_execute(
                "SELECT setval('fencing_token_seq', last_value + 1) FROM fencing_token_seq",
            )
            .unwrap();
        let mut tx = client.transaction().unwrap();
        let token = tx.query_one("SELECT acquire_fenced(7003, $1)", &[&round]);
        assert!(
            token.is_ok(),
            "round {round}: {:?}",
            token
                .err()
                .and_then(|e| e.as_db_error().map(|d| d.message().to_string()))
        );
        tx.rollback().unwrap();
    }
    on_standby
        .batch_execute("SELECT pg_wal_replay_resume()")
        .unwrap();
}
