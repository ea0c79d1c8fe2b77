//! Failover to a synchronous standby: the primary is killed during a storm of acquisitions,
//! the standby promoted, and the storm continues on it. Every token returned before the
//! failover is smaller than every token after it, three failovers in a row.

use fenced_lock_faults::{failovers_during_storms, report, SLOW_WAL_WRITER};

const FAILOVERS: usize = 3;

#[test]
fn synchronous_failover_during_storm() {
    let run = failovers_during_storms(
        "failover",
        [54336, 54337],
        FAILOVERS,
        &[SLOW_WAL_WRITER],
        true,
        false,
    );
    report(
        "synchronous failover",
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
    let run = failovers_during_storms("failover", [54336, 54337], FAILOVERS, &settings, true, true);
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
