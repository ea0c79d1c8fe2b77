//! Measurement, not a test (`make async-failover`): what an asynchronous standby does to
//! tokens at failover. The primary is killed during a storm, the asynchronous standby
//! promoted, and the storm continues; the figures show how many tokens the promoted server
//! issued again. The README's Guarantees section states the outcome.

use fenced_lock_faults::{failovers_during_storms, report, FailoverPlan, SLOW_WAL_WRITER};

const FAILOVERS: usize = 5;

const ASYNCHRONOUS: FailoverPlan = FailoverPlan {
    synchronous: false,
    rollback_only: false,
    client_options: "",
};

fn main() {
    for (label, settings) in [
        ("async failover, default WAL writer", vec![]),
        (
            "async failover, wal_writer_delay=10s",
            vec![SLOW_WAL_WRITER],
        ),
    ] {
        let run = failovers_during_storms("async", FAILOVERS, &settings, ASYNCHRONOUS);
        report(
            label,
            run.operations,
            FAILOVERS as u64,
            run.tokens,
            run.violations,
        );
    }
}
