//! Tokens after a clock that was wrong (third review of 0.3.0, item 8), on servers whose clock
//! libfaketime moves (the Debian package; FAKETIME in the server's environment only):
//! - before 2000, CREATE EXTENSION failed (the clock's start, microseconds since 2000-01-01,
//!   was negative: "setval: value ... is out of bounds"); it now starts at 1 and rises;
//! - a server that ran 400 days fast issued tokens above what a re-created extension started
//!   at once the clock was corrected; DROP EXTENSION now keeps the last token as the
//!   database's fenced_lock.token_floor, and the new extension starts above it.

use fenced_lock_faults::{faketime_leftovers, report, shm_clock_now, Server, DATABASE};
use std::time::SystemTime;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// libfaketime's environment for `faketime` (its FAKETIME syntax); the monotonic clock is
/// left alone (PostgreSQL's timeouts and pg_ctl's waits use it).
fn faked(faketime: &str) -> [(&str, &str); 3] {
    [
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", faketime),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]
}

fn tokens(client: &mut postgres::Client, count: i32) -> Vec<i64> {
    (0..count)
        .map(|key| {
            let mut tx = client.transaction().unwrap();
            let token: i64 = tx
                .query_one("SELECT acquire_fenced(8, $1)", &[&key])
                .unwrap()
                .get(0);
            tx.commit().unwrap();
            token
        })
        .collect()
}

/// A server started through libfaketime leaves no /dev/shm files behind once dropped.
fn dropped_without_leftovers(server: Server, since: SystemTime) {
    drop(server);
    let left = faketime_leftovers(since);
    assert!(left.is_empty(), "libfaketime's files left behind: {left:?}");
}

fn rising(tokens: &[i64]) -> bool {
    tokens.windows(2).all(|pair| pair[0] < pair[1])
}

#[test]
fn create_extension_with_the_clock_before_2000() {
    let since = shm_clock_now();
    let server = Server::fresh_with("clock-1999", &[], &faked("@1999-06-01 00:00:00"));
    let mut admin = server.connect("postgres");
    let year: f64 = admin
        .query_one("SELECT date_part('year', now())", &[])
        .unwrap()
        .get(0);
    assert_eq!(year, 1999.0, "the server's clock is libfaketime's");
    server.create_database();
    let mut client = server.connect(DATABASE);
    let issued = tokens(&mut client, 20);
    let violations =
        issued.iter().filter(|&&token| token < 1).count() + usize::from(!rising(&issued));
    report("clock_before_2000", 20, 1, issued.len(), violations);
    assert_eq!(violations, 0, "tokens {issued:?}");
    drop(client);
    dropped_without_leftovers(server, since);
}

#[test]
fn a_fast_clock_corrected_keeps_tokens_rising_across_a_reinstall() {
    let since = shm_clock_now();
    let mut server = Server::fresh_with("clock-fast", &[], &faked("+400d"));
    server.create_database();
    let mut client = server.connect(DATABASE);
    let fast = tokens(&mut client, 50);
    client.batch_execute("DROP EXTENSION fenced_lock").unwrap();
    drop(client);
    // The clock corrected: the same server, started without libfaketime.
    server.stop();
    server.set_environment(&[]);
    server.start();
    let mut client = server.connect(DATABASE);
    let clock: i64 = client
        .query_one(
            "SELECT ((date_part('epoch', clock_timestamp()) - 946684800) * 1000000)::bigint",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        clock < fast[0],
        "the corrected clock ({clock}) is below what the fast one issued ({})",
        fast[0]
    );
    client
        .batch_execute("CREATE EXTENSION fenced_lock")
        .unwrap();
    let after = tokens(&mut client, 50);
    let highest_before = *fast.iter().max().unwrap();
    let violations = after
        .iter()
        .filter(|&&token| token <= highest_before)
        .count()
        + usize::from(!rising(&after));
    report(
        "fast_clock_corrected",
        100,
        1,
        fast.len() + after.len(),
        violations,
    );
    assert_eq!(violations, 0, "before {fast:?}, after {after:?}");
    drop(client);
    dropped_without_leftovers(server, since);
}
