//! Measurement, not a test (`make async-failover`): what an asynchronous standby does to
//! tokens at failover. The primary is killed during a storm, the asynchronous standby
//! promoted, and the storm continues; the figures show how many tokens the promoted server
//! issued again. The README's Guarantees section states the outcome.

use fenced_lock_faults::{report, violations_across_epochs, Fates, Server, Storm};
use std::thread;
use std::time::Duration;

const FAILOVERS: usize = 5;
const PORTS: [u16; 2] = [54340, 54341];

fn main() {
    for (label, settings) in [
        ("async failover, default WAL writer", vec![]),
        (
            "async failover, wal_writer_delay=10s",
            vec!["wal_writer_delay=10000"],
        ),
    ] {
        let mut primary = Server::fresh("async-0", PORTS[0], &settings);
        primary.create_database();
        let mut epochs = Vec::new();
        let mut operations = 0;
        for failover in 0..FAILOVERS {
            let standby = Server::standby_of(
                &primary,
                &format!("async-{}", failover + 1),
                PORTS[(failover + 1) % 2],
                &settings,
            );
            let storm = Storm::start(&primary, 4, failover as u64, Fates::Mixed);
            thread::sleep(Duration::from_millis(500));
            primary.crash();
            let result = storm.finish();
            operations += result.operations;
            epochs.push(result.tokens);
            standby.promote();
            standby.wait_writable();
            drop(std::mem::replace(&mut primary, standby));
        }
        let storm = Storm::start(&primary, 4, 99, Fates::Mixed);
        thread::sleep(Duration::from_millis(300));
        let result = storm.finish();
        operations += result.operations;
        epochs.push(result.tokens);
        let tokens = epochs.iter().map(Vec::len).sum();
        let violations = violations_across_epochs(&epochs);
        report(label, operations, FAILOVERS as u64, tokens, violations);
    }
}
