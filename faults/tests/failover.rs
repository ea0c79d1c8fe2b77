//! Failover to a synchronous standby: the primary is killed during a storm of acquisitions,
//! the standby promoted, and the storm continues on it. Every token returned before the
//! failover is smaller than every token after it, three failovers in a row.

use fenced_lock_faults::{failovers_during_storms, report, FailoverPlan, SLOW_WAL_WRITER};

const FAILOVERS: usize = 3;

const SYNCHRONOUS: FailoverPlan = FailoverPlan {
    synchronous: true,
    rollback_only: false,
    client_options: "",
};

#[test]
fn synchronous_failover_during_storm() {
    let run = failovers_during_storms("failover", FAILOVERS, &[SLOW_WAL_WRITER], SYNCHRONOUS);
    report(
        "synchronous failover",
        run.operations,
        FAILOVERS as u64,
        run.tokens,
        run.violations,
    );
    assert_eq!(run.violations, 0);
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
    let run = failovers_during_storms("failover", FAILOVERS, &[SLOW_WAL_WRITER], plan);
    report(
        "synchronous failover, clients with synchronous_commit=off",
        run.operations,
        FAILOVERS as u64,
        run.tokens,
        run.violations,
    );
    assert_eq!(run.violations, 0);
}

/// The control: without durable tokens the standby misses the sequence WAL behind tokens
/// already returned, and the promoted server hands them out again.
#[test]
fn control_failover_without_durable_tokens_repeats_tokens() {
    let settings = [SLOW_WAL_WRITER, "fenced_lock.durable_tokens=off"];
    let plan = FailoverPlan {
        rollback_only: true,
        ..SYNCHRONOUS
    };
    let run = failovers_during_storms("failover", FAILOVERS, &settings, plan);
    report(
        "control: synchronous failover with durable_tokens=off",
        run.operations,
        FAILOVERS as u64,
        run.tokens,
        run.violations,
    );
    assert!(
        run.violations > 0,
        "without durable tokens a failover should repeat tokens"
    );
}
