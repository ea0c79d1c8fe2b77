//! Claiming queue rows with tokens (README: Claiming queue rows), with worker processes paused
//! past their lease: four workers claim jobs one at a time with the README's one-statement
//! claim (`fence = new_fencing_token()`, a 300 ms lease), work, and complete them with
//! `fenced_update_strict` (src/bin/queue_worker.rs, each worker a process of its own). The test SIGSTOPs a random worker for 700 ms again and again, so
//! workers stall mid-job while the others reclaim and complete their jobs; resumed, they try to
//! complete too. Every job must be completed exactly once at the table (an AFTER UPDATE trigger
//! logs each completion the table accepted), and every late completion must be refused with
//! SF001.

use fenced_lock_faults::{Lcg, Server, DATABASE};
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

const JOBS: i32 = 400;
const WORKERS: usize = 4;

fn spawn_worker(url: &str, name: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_queue_worker"))
        .args([url, name])
        .spawn()
        .expect("a worker process starts")
}

fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -{name} {}", child.id());
}

#[test]
fn paused_workers_never_complete_a_reclaimed_job() {
    let server = Server::fresh("queue-claims", &["shared_preload_libraries=fenced_lock"]);
    server.create_database();
    let mut admin = server.connect(DATABASE);
    admin
        .batch_execute(&format!(
            "CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL DEFAULT 'pending',
                                lease_until timestamptz, fence bigint, done_by text);
             INSERT INTO jobs (id) SELECT g FROM generate_series(1, {JOBS}) g;
             CREATE TABLE completed (id int, fence bigint, done_by text);
             CREATE TABLE late (id int, fence bigint, worker text);
             CREATE FUNCTION log_completion() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO completed VALUES (NEW.id, NEW.fence, NEW.done_by);
                 RETURN NULL;
             END $$;
             CREATE TRIGGER jobs_completed AFTER UPDATE ON jobs FOR EACH ROW
                 WHEN (NEW.state = 'done') EXECUTE FUNCTION log_completion();"
        ))
        .unwrap();

    let url = server.url(DATABASE);
    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|n| spawn_worker(&url, &format!("worker-{n}")))
        .collect();
    // Pause a random worker past its lease, again and again, until the queue is drained.
    let mut random = Lcg::new(26);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pauses = 0;
    loop {
        let left: i64 = admin
            .query_one("SELECT count(*) FROM jobs WHERE state <> 'done'", &[])
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{left} jobs left after 120 s");
        let paused = &workers[random.below(WORKERS as u64) as usize];
        signal(paused, "STOP");
        thread::sleep(Duration::from_millis(700));
        signal(paused, "CONT");
        pauses += 1;
        thread::sleep(Duration::from_millis(50));
    }
    for worker in &mut workers {
        assert!(
            worker.wait().expect("worker exits").success(),
            "a worker failed"
        );
    }

    let per_job: Vec<(i32, i64)> = admin
        .query(
            "SELECT j.id, count(c.id) FROM jobs j LEFT JOIN completed c USING (id)
              GROUP BY j.id ORDER BY j.id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let not_once: Vec<_> = per_job.iter().filter(|(_, n)| *n != 1).collect();
    let late: i64 = admin
        .query_one("SELECT count(*) FROM late", &[])
        .unwrap()
        .get(0);
    // Every refused completion carried a fence lower than the one the job was completed with.
    let refused_wrongly: i64 = admin
        .query_one(
            "SELECT count(*) FROM late l JOIN jobs j USING (id) WHERE l.fence >= j.fence",
            &[],
        )
        .unwrap()
        .get(0);
    println!(
        "queue claims: {JOBS} jobs, {WORKERS} workers, {pauses} pauses of 700 ms, \
         {late} late completions refused, {} jobs not completed exactly once",
        not_once.len()
    );
    assert!(
        not_once.is_empty(),
        "jobs not completed exactly once: {not_once:?}"
    );
    assert_eq!(refused_wrongly, 0, "a refusal with the job's own fence");
    assert!(
        late > 0,
        "no paused worker came back to a reclaimed job: the test proved nothing"
    );
}
