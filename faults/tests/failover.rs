//! Failover during a storm of acquisitions: the primary is killed, the standby promoted, and
//! the storm continues on it. Every token returned before the failover is smaller than every
//! token after it. To a synchronous standby, three failovers in a row, with tokens drawn from
//! the sequence at each call and from the shared allocator's blocks; to an asynchronous
//! standby that was cut off while the primary went on, ten, with the failover skip and
//! without it (the control).

use fenced_lock_faults::{failovers_during_storms, report, FailoverPlan, SLOW_WAL_WRITER};

/// Runs `failovers` failovers (servers `name-N`), prints the report line as `label`, and
/// returns the violations.
fn reported_failovers(
    label: &str,
    name: &str,
    failovers: usize,
    settings: &[&str],
    plan: FailoverPlan,
) -> usize {
    let run = failovers_during_storms(name, failovers, settings, plan);
    report(
        label,
        run.operations,
        failovers as u64,
        run.tokens,
        run.violations,
    );
    run.violations
}

const FAILOVERS: usize = 3;
const ASYNCHRONOUS_FAILOVERS: usize = 10;
/// The shared allocator, with its default block.
const PRELOAD: &str = "shared_preload_libraries=fenced_lock";
/// Small blocks, so that the primary reserves several after its standby was cut off (with
/// the default block, a short storm stays within blocks the standby already received).
const SMALL_BLOCKS: &str = "fenced_lock.token_block=100";

const SYNCHRONOUS: FailoverPlan = FailoverPlan {
    synchronous: true,
    rollback_only: false,
    client_options: "",
    cut_off_standby: false,
};

const ASYNCHRONOUS_CUT_OFF: FailoverPlan = FailoverPlan {
    synchronous: false,
    cut_off_standby: true,
    ..SYNCHRONOUS
};

#[test]
fn synchronous_failover_with_the_allocator() {
    let settings = [SLOW_WAL_WRITER, PRELOAD];
    let violations = reported_failovers(
        "synchronous failover, shared allocator",
        "failover",
        FAILOVERS,
        &settings,
        SYNCHRONOUS,
    );
    assert_eq!(violations, 0);
}

#[test]
fn asynchronous_failover_after_the_standby_was_cut_off() {
    let settings = [SLOW_WAL_WRITER, PRELOAD, SMALL_BLOCKS];
    let violations = reported_failovers(
        "asynchronous failover, standby cut off, failover skip",
        "async-failover",
        ASYNCHRONOUS_FAILOVERS,
        &settings,
        ASYNCHRONOUS_CUT_OFF,
    );
    assert_eq!(violations, 0);
}

#[test]
fn asynchronous_failover_after_the_standby_was_cut_off_per_call() {
    let violations = reported_failovers(
        "asynchronous failover, standby cut off, failover skip, tokens per call",
        "async-failover",
        ASYNCHRONOUS_FAILOVERS,
        &[SLOW_WAL_WRITER],
        ASYNCHRONOUS_CUT_OFF,
    );
    assert_eq!(violations, 0);
}

/// The control: without the skip, the promoted standby hands out again the tokens the old
/// primary issued after the standby was cut off.
#[test]
fn control_asynchronous_failover_without_skip_repeats_tokens() {
    let settings = [
        SLOW_WAL_WRITER,
        PRELOAD,
        SMALL_BLOCKS,
        "fenced_lock.failover_skip=0",
    ];
    let violations = reported_failovers(
        "control: asynchronous failover, standby cut off, failover_skip=0",
        "async-failover",
        ASYNCHRONOUS_FAILOVERS,
        &settings,
        ASYNCHRONOUS_CUT_OFF,
    );
    assert!(
        violations > 0,
        "without the skip an asynchronous failover should repeat tokens"
    );
}

#[test]
fn synchronous_failover_during_storm() {
    let violations = reported_failovers(
        "synchronous failover",
        "failover",
        FAILOVERS,
        &[SLOW_WAL_WRITER],
        SYNCHRONOUS,
    );
    assert_eq!(violations, 0);
}

/// Any role may set synchronous_commit = off (many applications do, per transaction, for
/// speed); the token's WAL is still confirmed by the synchronous standby.
#[test]
fn synchronous_failover_with_clients_that_turn_synchronous_commit_off() {
    let plan = FailoverPlan {
        rollback_only: true,
        client_options: "-c synchronous_commit=off",
        ..SYNCHRONOUS
    };
    let violations = reported_failovers(
        "synchronous failover, clients with synchronous_commit=off",
        "failover",
        FAILOVERS,
        &[SLOW_WAL_WRITER],
        plan,
    );
    assert_eq!(violations, 0);
}

/// The control: without durable tokens the standby misses the sequence WAL behind tokens
/// already returned, and the promoted server hands them out again.
#[test]
fn control_failover_without_durable_tokens_repeats_tokens() {
    // Without the failover skip too, which would cover the tokens lost with the WAL.
    let settings = [
        SLOW_WAL_WRITER,
        "fenced_lock.durable_tokens=off",
        "fenced_lock.failover_skip=0",
    ];
    let plan = FailoverPlan {
        rollback_only: true,
        ..SYNCHRONOUS
    };
    let violations = reported_failovers(
        "control: synchronous failover with durable_tokens=off",
        "failover",
        FAILOVERS,
        &settings,
        plan,
    );
    assert!(
        violations > 0,
        "without durable tokens a failover should repeat tokens"
    );
}
