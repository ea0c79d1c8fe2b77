//! Stale holder: the holder is cut off mid-work (pg_terminate_backend, or
//! idle_in_transaction_session_timeout); the successor gets a larger token, and the stale
//! holder's late conditional write is refused every time.

use fenced_lock_faults::{report, Server, DATABASE};
use std::thread;
use std::time::Duration;

const TRIALS: i32 = 100;

#[test]
fn stale_holder_is_fenced_off() {
    let server = Server::fresh("stale-holder", &[]);
    server.create_database();
    let mut admin = server.connect(DATABASE);
    admin
        .batch_execute(
            "CREATE TABLE resource (id int PRIMARY KEY, value text, fence bigint NOT NULL);
             INSERT INTO resource SELECT g, NULL, 0 FROM generate_series(0, 99) g;",
        )
        .unwrap();
    // The conditional write every client sends with its token.
    let write = "UPDATE resource SET value = $3, fence = $2 WHERE id = $1 AND fence <= $2";

    let mut violations = 0;
    for trial in 0..TRIALS {
        let mut holder = server.connect(DATABASE);
        let by_timeout = trial % 2 == 1;
        if by_timeout {
            holder
                .batch_execute("SET idle_in_transaction_session_timeout = '50ms'")
                .unwrap();
        }
        let holder_pid: i32 = holder
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        holder.batch_execute("BEGIN").unwrap();
        let stale_token: i64 = holder
            .query_one("SELECT acquire_fenced(2002, $1)", &[&trial])
            .unwrap()
            .get(0);

        // The holder stalls; the server cuts it off.
        if by_timeout {
            thread::sleep(Duration::from_millis(300));
        } else {
            let terminated: bool = admin
                .query_one("SELECT pg_terminate_backend($1, 10000)", &[&holder_pid])
                .unwrap()
                .get(0);
            assert!(terminated);
        }

        let mut successor = server.connect(DATABASE);
        let mut tx = successor.transaction().unwrap();
        let token: i64 = tx
            .query_one("SELECT acquire_fenced(2002, $1, '10 s')", &[&trial])
            .unwrap()
            .get(0);
        let written = tx.execute(write, &[&trial, &token, &"successor"]).unwrap();
        tx.commit().unwrap();
        if token <= stale_token || written != 1 {
            violations += 1;
        }

        // The stale holder's connection is gone; it wakes up and writes over a new one.
        assert!(
            holder.batch_execute("SELECT 1").is_err(),
            "holder was cut off"
        );
        let mut late = server.connect(DATABASE);
        let refused = late
            .execute(write, &[&trial, &stale_token, &"stale"])
            .unwrap()
            == 0;
        if !refused {
            violations += 1;
        }
    }
    let value_check: i64 = admin
        .query_one(
            "SELECT count(*) FROM resource WHERE value = 'successor'",
            &[],
        )
        .unwrap()
        .get(0);
    report(
        "stale holder",
        TRIALS as u64,
        TRIALS as u64,
        2 * TRIALS as usize,
        violations,
    );
    assert_eq!(value_check, TRIALS as i64);
    assert_eq!(violations, 0);
}
