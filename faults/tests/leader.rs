//! Three instances of the leader-election example (examples/leader) against one server, in
//! both modes. Session locks: the test kills the leader's backend. Leases, through PgBouncer in
//! transaction mode: the test kills the leader process. Each checks: a new leader in time
//! with a strictly higher term, accepted work only ever in rising term order (one leader at a
//! time), and the old leader's late write refused.

use fenced_lock_faults::{Bouncer, Server, DATABASE};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Child;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// One line an instance printed, when the test read it.
struct Event {
    at: Instant,
    words: Vec<String>,
}

fn leader_binary() -> PathBuf {
    let binary =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/faults/debug/fenced_leader");
    assert!(
        binary.exists(),
        "build the example first: cargo build --manifest-path examples/leader/Cargo.toml \
         --target-dir target/faults (make faults does)"
    );
    binary
}

/// The server and table the instances work on.
fn leader_server(name: &str) -> Server {
    let server = Server::fresh(name, &[]);
    server.create_database();
    server
        .connect(DATABASE)
        .batch_execute(
            "CREATE TABLE leader_work (id int PRIMARY KEY, leader text, beat int,
                                       fence bigint NOT NULL DEFAULT 0);
             INSERT INTO leader_work (id) VALUES (1);",
        )
        .unwrap();
    server
}

/// Starts alpha, beta and gamma with `args` against `url`; their processes, and their lines.
fn start_instances(url: &str, args: &[&str]) -> (Vec<Child>, mpsc::Receiver<Event>) {
    let (sender, events) = mpsc::channel::<Event>();
    let instances = ["alpha", "beta", "gamma"]
        .iter()
        .map(|name| {
            let mut child = Command::new(leader_binary())
                .args(["--url", url, "--name", name, "--seconds", "8"])
                .args(args)
                .stdout(Stdio::piped())
                .spawn()
                .expect("start the example");
            let stdout = child.stdout.take().unwrap();
            let sender = sender.clone();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let words = line.split_whitespace().map(String::from).collect();
                    let _ = sender.send(Event {
                        at: Instant::now(),
                        words,
                    });
                }
            });
            child
        })
        .collect();
    (instances, events)
}

/// Reads lines until the first leader: its index in `log`.
fn first_leader(events: &mpsc::Receiver<Event>, log: &mut Vec<Event>) -> usize {
    loop {
        let event = events
            .recv_timeout(Duration::from_secs(10))
            .expect("a first leader");
        let is_leader = event.words[0] == "LEADER";
        log.push(event);
        if is_leader {
            return log.len() - 1;
        }
    }
}

/// After the fault at `faulted_at` on the first leader (`log[first]`): a new leader within
/// `takeover_limit` with a higher term, accepted work in rising term order; the new term.
fn check_takeover(
    log: &[Event],
    first: usize,
    faulted_at: Instant,
    takeover_limit: Duration,
) -> i64 {
    for event in log.iter().filter(|e| e.words[0] != "WORK") {
        println!("  {}", event.words.join(" "));
    }
    let (old_name, old_term) = (
        &log[first].words[1],
        log[first].words[2].parse::<i64>().unwrap(),
    );
    let lines = |kind: &'static str| log.iter().filter(move |e| e.words[0] == kind);
    let new_leader = lines("LEADER")
        .find(|e| e.at > faulted_at)
        .expect("a new leader after the fault");
    let new_term: i64 = new_leader.words[2].parse().unwrap();
    let takeover = new_leader.at - faulted_at;
    println!(
        "leader: old {old_name} term {old_term}; new {} term {new_term} after {takeover:?}",
        new_leader.words[1]
    );
    assert!(takeover < takeover_limit, "takeover took {takeover:?}");
    assert!(new_term > old_term, "the new term must be higher");
    // One leader at a time: accepted work never goes back to an older term.
    let accepted: Vec<i64> = lines("WORK")
        .filter(|e| e.words[3] == "accepted")
        .map(|e| e.words[2].parse().unwrap())
        .collect();
    assert!(
        accepted.windows(2).all(|pair| pair[0] <= pair[1]),
        "terms interleaved: {accepted:?}"
    );
    assert!(accepted.contains(&old_term) && accepted.contains(&new_term));
    new_term
}

#[test]
fn three_instances_elect_one_leader_at_a_time() {
    let server = leader_server("leader");
    let (instances, events) = start_instances(&server.url(DATABASE), &[]);

    // Wait for the first leader and let it work a little, then kill its backend.
    let mut log: Vec<Event> = Vec::new();
    let first = first_leader(&events, &mut log);
    let old_name = log[first].words[1].clone();
    let old_pid: i32 = log[first].words[3].parse().unwrap();
    thread::sleep(Duration::from_millis(500));
    let killed_at = Instant::now();
    let terminated: bool = server
        .connect(DATABASE)
        .query_one("SELECT pg_terminate_backend($1, 10000)", &[&old_pid])
        .unwrap()
        .get(0);
    assert!(terminated);

    for event in events.iter() {
        log.push(event);
    }
    for mut child in instances {
        assert!(child.wait().unwrap().success(), "an instance failed");
    }

    let new_term = check_takeover(&log, first, killed_at, Duration::from_secs(3));
    let lines = |kind: &'static str| log.iter().filter(move |e| e.words[0] == kind);

    // The old leader woke up after its pause and wrote with its old term: refused.
    let late: Vec<&Event> = lines("LATE").filter(|e| e.words[1] == old_name).collect();
    assert_eq!(late.len(), 1, "the old leader made one late write");
    assert_eq!(late[0].words[3], "refused");
    // The row carries a newer leader's term, not the stale one.
    let fence: i64 = server
        .connect(DATABASE)
        .query_one("SELECT fence FROM leader_work WHERE id = 1", &[])
        .unwrap()
        .get(0);
    assert!(fence >= new_term);
}

#[test]
fn three_lease_instances_through_pgbouncer_survive_a_killed_leader() {
    const TTL_MS: u64 = 1000;
    let server = leader_server("leader-lease");
    let bouncer = Bouncer::start("leader-lease-bouncer", &server, DATABASE);
    let (mut instances, events) =
        start_instances(&bouncer.url(DATABASE), &["--lease", &TTL_MS.to_string()]);

    // Wait for the first leader and let it work a little, then kill its process: its lease
    // stays until the TTL runs out.
    let mut log: Vec<Event> = Vec::new();
    let first = first_leader(&events, &mut log);
    let old_term: i64 = log[first].words[2].parse().unwrap();
    let old_process: u32 = log[first].words[3].parse().unwrap();
    thread::sleep(Duration::from_millis(500));
    let leader = instances
        .iter_mut()
        .find(|child| child.id() == old_process)
        .expect("the leader is one of the instances");
    leader.kill().unwrap();
    let killed_at = Instant::now();

    for event in events.iter() {
        log.push(event);
    }
    for mut child in instances {
        let status = child.wait().unwrap();
        assert!(
            child.id() == old_process || status.success(),
            "an instance failed"
        );
    }
    let new_term = check_takeover(&log, first, killed_at, Duration::from_millis(TTL_MS + 1000));

    // The old leader's write, had it been paused rather than killed, is refused.
    let mut client = server.connect(DATABASE);
    let late: bool = client
        .query_one(
            "SELECT fenced_update_or_false('leader_work', 1, $1, '{\"leader\": \"late\"}')",
            &[&old_term],
        )
        .unwrap()
        .get(0);
    assert!(!late, "the old leader's late write was accepted");
    let fence: i64 = client
        .query_one("SELECT fence FROM leader_work WHERE id = 1", &[])
        .unwrap()
        .get(0);
    assert!(fence >= new_term);
}
