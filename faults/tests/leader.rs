//! Three instances of the leader-election example (examples/leader) against one server. The
//! test kills the leader's backend and checks: a new leader within a few seconds with a
//! strictly higher term, accepted work only ever in rising term order (one leader at a time),
//! and the old leader's late write refused.

use fenced_lock_faults::{Server, DATABASE};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
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

#[test]
fn three_instances_elect_one_leader_at_a_time() {
    let server = Server::fresh("leader", &[]);
    server.create_database();
    server
        .connect(DATABASE)
        .batch_execute(
            "CREATE TABLE leader_work (id int PRIMARY KEY, leader text, beat int,
                                       fence bigint NOT NULL DEFAULT 0);
             INSERT INTO leader_work (id) VALUES (1);",
        )
        .unwrap();

    let (sender, events) = mpsc::channel::<Event>();
    let instances: Vec<_> = ["alpha", "beta", "gamma"]
        .iter()
        .map(|name| {
            let mut child = Command::new(leader_binary())
                .args([
                    "--url",
                    &server.url(DATABASE),
                    "--name",
                    name,
                    "--seconds",
                    "8",
                ])
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
    drop(sender);

    // Wait for the first leader and let it work a little, then kill its backend.
    let mut log: Vec<Event> = Vec::new();
    let first = loop {
        let event = events
            .recv_timeout(Duration::from_secs(10))
            .expect("a first leader");
        let is_leader = event.words[0] == "LEADER";
        log.push(event);
        if is_leader {
            break log.len() - 1;
        }
    };
    let (old_name, old_term) = (
        log[first].words[1].clone(),
        log[first].words[2].parse::<i64>().unwrap(),
    );
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

    for event in log.iter().filter(|e| e.words[0] != "WORK") {
        println!("  {}", event.words.join(" "));
    }
    let lines = |kind: &'static str| log.iter().filter(move |e| e.words[0] == kind);
    let new_leader = lines("LEADER")
        .find(|e| e.at > killed_at)
        .expect("a new leader after the kill");
    let new_term: i64 = new_leader.words[2].parse().unwrap();
    let takeover = new_leader.at - killed_at;
    println!(
        "leader: old {old_name} term {old_term}; new {} term {new_term} after {takeover:?}",
        new_leader.words[1]
    );
    assert!(
        takeover < Duration::from_secs(3),
        "takeover took {takeover:?}"
    );
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
