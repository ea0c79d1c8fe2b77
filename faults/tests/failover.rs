//! Failover to a synchronous standby: the primary is killed during a storm of acquisitions,
//! the standby promoted, and the storm continues on it. Every token returned before the
//! failover is smaller than every token after it, three failovers in a row.

use fenced_lock_faults::{report, violations_across_epochs, Fates, Server, Storm, DATABASE};
use std::thread;
use std::time::{Duration, Instant};

const FAILOVERS: usize = 3;
const PORTS: [u16; 2] = [54336, 54337];

/// Makes every standby of `primary` synchronous and waits until one is in sync.
fn make_synchronous(primary: &Server) {
    let mut client = primary.connect("postgres");
    // One statement per call: ALTER SYSTEM refuses to run in a (multi-statement) block.
    for statement in [
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
        "ALTER SYSTEM SET synchronous_commit = 'on'",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(statement).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let in_sync: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                &[],
            )
            .unwrap()
            .get(0);
        if in_sync == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "standby did not become synchronous"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Runs FAILOVERS failovers during storms; returns (operations, tokens checked, violations).
/// Every other storm rolls all its grants back (the longest-unflushed case); `rollback_only`
/// makes them all do so.
fn failovers_during_storms(settings: &[&str], rollback_only: bool) -> (u64, usize, usize) {
    let mut primary = Server::fresh("failover-0", PORTS[0], settings);
    primary.create_database();
    let mut epochs = Vec::new();
    let mut operations = 0;
    for failover in 0..FAILOVERS {
        let standby = Server::standby_of(
            &primary,
            &format!("failover-{}", failover + 1),
            PORTS[(failover + 1) % 2],
            settings,
        );
        make_synchronous(&primary);

        let fates = match rollback_only || failover % 2 == 1 {
            true => Fates::RollbackOnly,
            false => Fates::Mixed,
        };
        let storm = Storm::start(&primary, 4, failover as u64, fates);
        thread::sleep(Duration::from_millis(500));
        primary.crash();
        let result = storm.finish();
        assert!(!result.tokens.is_empty(), "failover {failover}: no tokens");
        operations += result.operations;
        epochs.push(result.tokens);

        standby.promote();
        standby.wait_writable();
        // The old primary is gone for good; its directory is reused two failovers later.
        drop(std::mem::replace(&mut primary, standby));
    }
    let storm = Storm::start(&primary, 4, 99, Fates::Mixed);
    thread::sleep(Duration::from_millis(300));
    let result = storm.finish();
    operations += result.operations;
    epochs.push(result.tokens);
    // The promoted server still serves the data: the extension is there.
    primary.connect(DATABASE).batch_execute("SELECT 1").unwrap();

    let tokens = epochs.iter().map(Vec::len).sum();
    (operations, tokens, violations_across_epochs(&epochs))
}

/// The WAL writer would flush (and so ship) WAL within 200 ms; a 10 s delay keeps unshipped
/// sequence WAL around for the whole storm.
const SLOW_WAL_WRITER: &str = "wal_writer_delay=10000";

#[test]
fn synchronous_failover_during_storm() {
    let (operations, tokens, violations) = failovers_during_storms(&[SLOW_WAL_WRITER], false);
    report(
        "synchronous failover",
        operations,
        FAILOVERS as u64,
        tokens,
        violations,
    );
    assert_eq!(violations, 0);
}

/// The control: without durable tokens the standby misses the sequence WAL behind tokens
/// already returned, and the promoted server hands them out again.
#[test]
fn control_failover_without_durable_tokens_repeats_tokens() {
    let settings = [SLOW_WAL_WRITER, "fenced_lock.durable_tokens=off"];
    let (operations, tokens, violations) = failovers_during_storms(&settings, true);
    report(
        "control: synchronous failover with durable_tokens=off",
        operations,
        FAILOVERS as u64,
        tokens,
        violations,
    );
    assert!(
        violations > 0,
        "without durable tokens a failover should repeat tokens"
    );
}
