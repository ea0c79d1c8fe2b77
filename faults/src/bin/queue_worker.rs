//! A queue worker for the fault suite's queue_claims test, as a process of its own so the test
//! can pause it (SIGSTOP): claim one job with the README's claim (a 300 ms lease), work 40 ms,
//! complete it with fenced_update_strict; a refused completion (SF001) is logged in `late`.
//! Exits when every job is done.
//!
//!     queue_worker URL NAME

use postgres::{Client, NoTls};
use std::thread;
use std::time::Duration;

const CLAIM: &str = "UPDATE jobs SET state = 'running', fence = new_fencing_token(),
                            lease_until = clock_timestamp() + interval '300 milliseconds'
                      WHERE id IN (SELECT id FROM jobs
                                    WHERE state = 'pending'
                                       OR (state = 'running' AND lease_until < clock_timestamp())
                                    ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
                  RETURNING id, fence";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, name) = (&args[1], &args[2]);
    let mut conn = Client::connect(url, NoTls).expect("worker connects");
    let changes = format!(r#"{{"state": "done", "done_by": "{name}"}}"#);
    loop {
        let Some(row) = conn.query_opt(CLAIM, &[]).expect("claim") else {
            let left: i64 = conn
                .query_one("SELECT count(*) FROM jobs WHERE state <> 'done'", &[])
                .expect("count")
                .get(0);
            if left == 0 {
                return;
            }
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        let (id, fence): (i32, i64) = (row.get(0), row.get(1));
        thread::sleep(Duration::from_millis(40));
        let completion = conn.execute(
            "SELECT fenced_update('jobs', $1::int, $2, $3::text::jsonb)",
            &[&id, &fence, &changes],
        );
        match completion {
            Ok(_) => {}
            Err(error) if error.code().map(|c| c.code()) == Some("SF001") => {
                conn.execute("INSERT INTO late VALUES ($1, $2, $3)", &[&id, &fence, name])
                    .expect("log the refusal");
            }
            Err(error) => panic!("{name}: completion of job {id} failed: {error}"),
        }
    }
}
