//! Crashes during a storm of acquisitions: tokens received before a crash are all smaller
//! than every token received after the restart, and no token is ever seen twice.

use fenced_lock_faults::{
    report, violations_across_epochs, Fates, Lcg, Server, Storm, DATABASE, SLOW_WAL_WRITER,
};
use std::process::Command;
use std::thread;
use std::time::Duration;

const CLIENTS: usize = 4;
/// With the shared grants table, so restarts also show it comes back empty, and the shared
/// allocator (its default block).
const PRELOAD: &str = "shared_preload_libraries=fenced_lock";
/// Preloaded, with every token drawn from the sequence at its call.
const PER_CALL: &str = "fenced_lock.token_block=1";

/// Runs `cycles` storms, each ended by `fault`, then one more storm after the last fault.
/// Odd cycles roll every grant back (the longest-unflushed case), even cycles mix fates;
/// `rollback_only` makes every cycle roll back.
fn storms_across_faults(
    server: &Server,
    cycles: u64,
    rollback_only: bool,
    fault: impl Fn(&Server, &Storm),
) -> (u64, Vec<Vec<i64>>) {
    let mut rng = Lcg::new(cycles);
    let mut operations = 0;
    let mut epochs = Vec::new();
    for cycle in 0..=cycles {
        let fates = match rollback_only || cycle % 2 == 1 {
            true => Fates::RollbackOnly,
            false => Fates::Mixed,
        };
        let storm = Storm::start(server, CLIENTS, cycle, fates);
        thread::sleep(Duration::from_millis(150 + rng.below(250)));
        if cycle < cycles {
            fault(server, &storm);
        }
        let result = storm.finish();
        assert!(
            !result.tokens.is_empty(),
            "cycle {cycle} received no tokens"
        );
        operations += result.operations;
        epochs.push(result.tokens);
        if cycle < cycles {
            server.start();
            server.wait_writable();
            // A crash restart re-creates shared memory: no grant of a dead backend is left.
            let stale: i64 = server
                .connect(DATABASE)
                .query_one(
                    "SELECT count(*) FROM fenced_lock_internal.fenced_lock_grants()",
                    &[],
                )
                .unwrap()
                .get(0);
            assert_eq!(stale, 0, "grants survived the restart");
        }
    }
    (operations, epochs)
}

#[test]
fn immediate_shutdown_during_storm() {
    immediate_shutdowns("crash (pg_ctl stop -m immediate), shared allocator", &[]);
}

#[test]
fn immediate_shutdown_during_storm_per_call() {
    immediate_shutdowns(
        "crash (pg_ctl stop -m immediate), tokens per call",
        &[PER_CALL],
    );
}

fn immediate_shutdowns(test: &str, extra: &[&str]) {
    no_repeats_across_faults(test, "crash", extra, 20, |server, _| server.crash());
}

#[test]
fn backend_killed_during_storm() {
    backend_kills("backend crash (kill -9), shared allocator", &[]);
}

#[test]
fn backend_killed_during_storm_per_call() {
    backend_kills("backend crash (kill -9), tokens per call", &[PER_CALL]);
}

fn backend_kills(test: &str, extra: &[&str]) {
    no_repeats_across_faults(test, "backend-crash", extra, 10, |_, storm| {
        let pid = storm.backend_pids.lock().unwrap()[0];
        let killed = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success(), "kill -9 {pid}");
    });
}

/// `cycles` storms on a fresh preloaded server (with `extra` settings), each ended by `fault`:
/// no token may be handed out twice across them.
fn no_repeats_across_faults(
    test: &str,
    server_name: &str,
    extra: &[&str],
    cycles: u64,
    fault: impl Fn(&Server, &Storm),
) {
    let settings: Vec<&str> = [SLOW_WAL_WRITER, PRELOAD]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    let server = Server::fresh(server_name, &settings);
    server.create_database();
    let (operations, epochs) = storms_across_faults(&server, cycles, false, fault);
    let tokens = epochs.iter().map(Vec::len).sum();
    let violations = violations_across_epochs(&epochs);
    report(test, operations, cycles, tokens, violations);
    assert_eq!(violations, 0);
}

/// The control: with `fenced_lock.durable_tokens = off` the same crashes do hand out tokens
/// again, which shows that the faults injected above reach the window durability closes.
#[test]
fn control_without_durable_tokens_repeats_tokens() {
    let settings = [SLOW_WAL_WRITER, "fenced_lock.durable_tokens=off"];
    let server = Server::fresh("crash-control", &settings);
    server.create_database();
    let cycles = 10;
    let (operations, epochs) =
        storms_across_faults(&server, cycles, true, |server, _| server.crash());
    let tokens = epochs.iter().map(Vec::len).sum();
    let violations = violations_across_epochs(&epochs);
    report(
        "control: crash with durable_tokens=off",
        operations,
        cycles,
        tokens,
        violations,
    );
    assert!(
        violations > 0,
        "without durable tokens a crash should repeat tokens"
    );
}
