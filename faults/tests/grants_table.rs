//! The shared grants table, written without a lock: 8 connections take and commit fenced
//! locks on keys of their own as fast as they can (half of them two keys at a time with
//! acquire_fenced_all, which publishes its grants together) while 2 readers copy the table in
//! a loop, one through `fenced_lock_internal.fenced_lock_grants()`, one through the `fenced_locks` view (which
//! indexes the grants and joins them to the lock table). Every grant a reader sees is one that
//! was granted, whole (its pid, key and token belong together), and no two rows share a pid
//! and key; with room for only 4 grants, no more than 4 are ever shown, and once the load ends
//! every slot is free again.

use fenced_lock_faults::{Server, DATABASE};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

const WORKERS: i32 = 8;
const GRANTS_EACH: i32 = 1_500;
/// What each reader reads in a loop.
const READS: [&str; 2] = [
    "SELECT pid, ns, id, token FROM fenced_lock_internal.fenced_lock_grants()",
    "SELECT pid, ns, id, token FROM fenced_locks WHERE token IS NOT NULL",
];
const SLOTS: i64 = 4;

/// (pid, ns, id, token) of every row a reader saw.
type Seen = Vec<(i32, i32, i32, i64)>;

#[test]
fn readers_see_whole_grants_while_backends_publish_and_withdraw() {
    let server = Server::fresh(
        "grants_table",
        &[
            "shared_preload_libraries=fenced_lock",
            &format!("fenced_lock.max_grants={SLOTS}"),
            "max_connections=30",
        ],
    );
    server.create_database();
    let done = Arc::new(AtomicBool::new(false));

    let readers: Vec<_> = (READS.into_iter())
        .map(|query| {
            let mut client = server.connect(DATABASE);
            let done = done.clone();
            thread::spawn(move || {
                let mut seen = Seen::new();
                let mut most_at_once = 0;
                while !done.load(Ordering::Relaxed) {
                    let rows = client.query(query, &[]).unwrap();
                    let mut keys = HashSet::new();
                    for row in &rows {
                        let grant = (row.get(0), row.get(1), row.get(2), row.get(3));
                        assert!(
                            keys.insert((grant.0, grant.1, grant.2)),
                            "one copy of the table shows the grant {grant:?} twice"
                        );
                        seen.push(grant);
                    }
                    most_at_once = most_at_once.max(rows.len() as i64);
                }
                (seen, most_at_once)
            })
        })
        .collect();

    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let mut client = server.connect(DATABASE);
            thread::spawn(move || {
                let pid: i32 = client
                    .query_one("SELECT pg_backend_pid()", &[])
                    .unwrap()
                    .get(0);
                // id -> token of each grant this worker was given.
                let mut granted = HashMap::new();
                for i in 0..GRANTS_EACH {
                    let id = worker * 100_000 + i;
                    let mut tx = client.transaction().unwrap();
                    // Odd workers: the key and its twin 50,000 on, in one call, one token
                    // for both.
                    let (ids, row) = match worker % 2 {
                        0 => (
                            vec![id],
                            tx.query_one("SELECT acquire_fenced(7700, $1)", &[&id]),
                        ),
                        _ => {
                            let ids = vec![id, id + 50_000];
                            let row = tx.query_one("SELECT acquire_fenced_all(7700, $1)", &[&ids]);
                            (ids, row)
                        }
                    };
                    let token: i64 = row.unwrap().get(0);
                    tx.commit().unwrap();
                    granted.extend(ids.into_iter().map(|id| (id, token)));
                }
                (pid, granted)
            })
        })
        .collect();
    let granted: HashMap<i32, HashMap<i32, i64>> =
        workers.into_iter().map(|w| w.join().unwrap()).collect();
    done.store(true, Ordering::Relaxed);

    let mut rows_seen = 0;
    for (reader, query) in readers.into_iter().zip(READS) {
        let (seen, most_at_once) = reader.join().unwrap();
        assert!(!seen.is_empty(), "{query} showed no grant at all");
        assert!(
            most_at_once <= SLOTS,
            "a copy of the table showed {most_at_once} grants; it has {SLOTS} slots"
        );
        for (pid, ns, id, token) in &seen {
            assert_eq!(
                *ns, 7700,
                "a grant of another namespace: {pid} {ns} {id} {token}"
            );
            let given = granted
                .get(pid)
                .and_then(|grants| grants.get(id))
                .unwrap_or_else(|| panic!("pid {pid} was never granted ({ns}, {id})"));
            assert_eq!(
                given, token,
                "pid {pid}'s grant of ({ns}, {id}) was shown with another grant's token"
            );
        }
        rows_seen += seen.len();
    }

    // Every slot is free again: one session publishes as many grants as there are slots.
    let mut client = server.connect(DATABASE);
    let published: i64 = client
        .query_one(
            "SELECT count(acquire_fenced_session(7701, g)) FROM generate_series(1, $1::int) g",
            &[&(SLOTS as i32)],
        )
        .and_then(|_| {
            client.query_one(
                "SELECT count(*) FROM fenced_lock_internal.fenced_lock_grants()",
                &[],
            )
        })
        .unwrap()
        .get(0);
    assert_eq!(published, SLOTS, "slots were left claimed after the load");
    println!(
        "grants table: {} grants by {WORKERS} backends, {rows_seen} rows read by {} readers, all whole",
        granted.values().map(HashMap::len).sum::<usize>(),
        READS.len()
    );
}
