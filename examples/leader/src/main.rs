//! A leader-election loop on fenced_lock.
//!
//! Each instance keeps one dedicated connection (never a transaction-mode pooler: the lease is
//! that connection's session lock). It tries `become_leader`; the leader does its work through
//! `fenced_update` with its term as the fencing token and checks `current_fence` before each
//! step; it steps down as soon as either says it lost the lease. A leader whose connection is
//! cut behaves like a paused process: after `--pause-ms` it wakes up and tries one more write
//! with its old term, which a newer leader's writes have fenced off.
//!
//! Usage: fenced_leader --url URL --name NAME [--ns 4242 --id 1 --seconds 10 --pause-ms 1500]
//! Prints one line per event: `LEADER name term pid`, `WORK name term accepted|superseded`,
//! `STEPDOWN name term reason`, `LATE name term accepted|refused`.

use postgres::{Client, NoTls};
use std::time::{Duration, Instant};

struct Options {
    url: String,
    name: String,
    ns: i32,
    id: i32,
    seconds: u64,
    pause_ms: u64,
}

fn options() -> Options {
    let mut options = Options {
        url: String::new(),
        name: String::from("leader"),
        ns: 4242,
        id: 1,
        seconds: 10,
        pause_ms: 1500,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--url" => options.url = value,
            "--name" => options.name = value,
            "--ns" => options.ns = value.parse().expect("--ns takes an integer"),
            "--id" => options.id = value.parse().expect("--id takes an integer"),
            "--seconds" => options.seconds = value.parse().expect("--seconds takes an integer"),
            "--pause-ms" => options.pause_ms = value.parse().expect("--pause-ms takes an integer"),
            other => panic!("unknown option {other}"),
        }
    }
    assert!(!options.url.is_empty(), "--url is required");
    options
}

/// One fenced step of the leader's work: true when the write was accepted.
fn work(client: &mut Client, o: &Options, term: i64, beat: i32) -> Result<bool, postgres::Error> {
    let row = client.query_one(
        // $1 is cast: fenced_update's id is polymorphic and this driver sends untyped parameters.
        "SELECT fenced_update('leader_work', $1::int, $2, \
         jsonb_build_object('leader', $3::text, 'beat', $4::int))",
        &[&o.id, &term, &o.name, &beat],
    )?;
    Ok(row.get(0))
}

/// Why the leader loop ended on an error: a closed connection means the lease is gone with
/// it; anything else is reported and also ends this term.
fn lost_or_failed(client: &Client, o: &Options, error: &postgres::Error) -> &'static str {
    if client.is_closed() {
        "connection lost"
    } else {
        eprintln!("{}: {error}", o.name);
        "error"
    }
}

fn main() {
    let o = options();
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    while Instant::now() < deadline {
        let Ok(mut client) = Client::connect(&o.url, NoTls) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let _ = client.batch_execute(&format!("SET application_name = '{}'", o.name));
        // Follower: try to lead every 100 ms.
        let term: Option<i64> =
            match client.query_one("SELECT become_leader($1, $2)", &[&o.ns, &o.id]) {
                Ok(row) => row.get(0),
                Err(_) => continue,
            };
        let Some(term) = term else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let pid: i32 = match client.query_one("SELECT pg_backend_pid()", &[]) {
            Ok(row) => row.get(0),
            Err(_) => continue,
        };
        println!("LEADER {} {term} {pid}", o.name);
        // Leader: check the lease, then do fenced work, until either fails.
        let mut beat = 0;
        let reason = loop {
            if Instant::now() >= deadline {
                let _ = client.query_one("SELECT release_fenced($1, $2)", &[&o.ns, &o.id]);
                break "done";
            }
            match client.query_one("SELECT current_fence($1, $2)", &[&o.ns, &o.id]) {
                Ok(row) if row.get::<_, Option<i64>>(0) == Some(term) => {}
                Ok(_) => break "lease lost",
                Err(error) => break lost_or_failed(&client, &o, &error),
            }
            beat += 1;
            match work(&mut client, &o, term, beat) {
                Ok(true) => println!("WORK {} {term} accepted", o.name),
                Ok(false) => {
                    println!("WORK {} {term} superseded", o.name);
                    break "superseded";
                }
                Err(error) => break lost_or_failed(&client, &o, &error),
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        println!("STEPDOWN {} {term} {reason}", o.name);
        if reason == "connection lost" {
            // Like a process that was paused while its lease ran out: it wakes up later and
            // writes with the term it still believes in.
            std::thread::sleep(Duration::from_millis(o.pause_ms));
            if let Ok(mut late) = Client::connect(&o.url, NoTls) {
                if let Ok(accepted) = work(&mut late, &o, term, -1) {
                    let verdict = if accepted { "accepted" } else { "refused" };
                    println!("LATE {} {term} {verdict}", o.name);
                }
            }
        }
    }
}
