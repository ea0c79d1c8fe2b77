//! Waiting lease acquires line up: each waits in the key's line (a lock the lock manager grants
//! in arrival order) and only the head of the line looks at the lease, so waiters are granted
//! in the order they arrived, each with a larger token. A call that does not wait takes no
//! free lease from under the head of the line: with the head's backend stopped (SIGSTOP), a
//! released lease stays the head's, and the head takes it when it runs again.

use fenced_lock_faults::{next_grant, no_grant, signal, until, Server, DATABASE};
use postgres::{Client, NoTls};
use std::sync::mpsc::{channel, Sender};
use std::thread;
use std::time::Duration;

const PRELOAD: &str = "shared_preload_libraries=fenced_lock";

/// How long a grant the test expects may take to show.
const GRANT_WAIT: Duration = Duration::from_secs(20);

/// One lease granted to a waiter: which waiter, and its token.
#[derive(Debug)]
struct Granted {
    waiter: usize,
    token: i64,
}

/// A client waiting for the lease of (ns, 1) as owner "waiter-N", in autocommit (as through a
/// pooler); it releases the lease when told to.
struct Waiter {
    release: Sender<()>,
    done: thread::JoinHandle<()>,
}

impl Waiter {
    /// Starts waiter `waiter`; returns once it is in the key's line (`admin` counts the line's
    /// lock in pg_locks).
    fn start(
        server: &Server,
        admin: &mut Client,
        waiter: usize,
        ns: i32,
        granted: &Sender<Granted>,
    ) -> Waiter {
        let in_line_before = in_line(admin, ns).0;
        let (release_now, told) = channel::<()>();
        let (url, granted) = (server.url(DATABASE), granted.clone());
        let done = thread::spawn(move || {
            let mut client = Client::connect(&url, NoTls).unwrap();
            let owner = format!("waiter-{waiter}");
            let token: Option<i64> = client
                .query_one(
                    "SELECT acquire_lease($1, 1, $2, '1 min', '60 s')",
                    &[&ns, &owner],
                )
                .unwrap()
                .get(0);
            let token = token.expect("a waiting acquire_lease is granted within its wait");
            granted.send(Granted { waiter, token }).unwrap();
            told.recv().unwrap();
            release(&mut client, ns, token);
        });
        until(admin, "the waiter to line up", GRANT_WAIT, |admin| {
            in_line(admin, ns).0 == in_line_before + 1
        });
        Waiter {
            release: release_now,
            done,
        }
    }

    fn release(self) {
        self.release.send(()).unwrap();
        self.done.join().unwrap();
    }
}

/// The sessions in the line of (ns, 1)'s lease (its lock: advisory, objsubid 4), and the pid
/// at its head.
fn in_line(admin: &mut Client, ns: i32) -> (i64, Option<i32>) {
    let row = admin
        .query_one(
            "SELECT count(*), max(pid) FILTER (WHERE granted) FROM pg_locks
              WHERE locktype = 'advisory' AND classid = $1::int::oid AND objid = 1
                AND objsubid = 4",
            &[&ns],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// The lease of (ns, 1) for `owner`, without waiting: its token, or None.
fn try_lease(client: &mut Client, ns: i32, owner: &str) -> Option<i64> {
    client
        .query_one(
            "SELECT try_acquire_lease($1, 1, $2, '1 min')",
            &[&ns, &owner],
        )
        .unwrap()
        .get(0)
}

fn release(client: &mut Client, ns: i32, token: i64) {
    let released: bool = client
        .query_one("SELECT release_lease($1, 1, $2)", &[&ns, &token])
        .unwrap()
        .get(0);
    assert!(released, "lease ({ns}, 1) released with token {token}");
}

/// A backend stopped with SIGSTOP until this is dropped (also when the test fails, so that its
/// server can stop).
struct Stopped(u32);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        signal(pid, "STOP");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// Four waiters behind a holder are granted in the order they arrived, each when the one
/// before releases, with tokens rising in grant order.
#[test]
fn lease_waiters_are_granted_in_arrival_order() {
    let server = Server::fresh("lease-line-order", &[PRELOAD]);
    server.create_database();
    let mut admin = server.connect(DATABASE);
    let ns = 7801;
    let mut holder = server.connect(DATABASE);
    let first_token = try_lease(&mut holder, ns, "holder").expect("a free lease");

    let (granted_to, granted) = channel();
    let mut waiters: Vec<Waiter> = (1..=4)
        .map(|waiter| Waiter::start(&server, &mut admin, waiter, ns, &granted_to))
        .collect();
    no_grant(&granted);

    release(&mut holder, ns, first_token);
    let mut previous = first_token;
    for expected in 1..=4 {
        let grant = next_grant(&granted, GRANT_WAIT);
        assert_eq!(grant.waiter, expected, "{grant:?}");
        assert!(grant.token > previous, "{grant:?} above {previous}");
        previous = grant.token;
        no_grant(&granted);
        waiters.remove(0).release();
    }
    assert_eq!(in_line(&mut admin, ns).0, 0);
}

/// A released lease is the head of the line's, even while the head's backend is stopped: a
/// call that does not wait gets NULL meanwhile; the head takes the lease when it runs again,
/// and once it released it, the call that does not wait takes it.
#[test]
fn a_call_that_does_not_wait_takes_no_lease_from_the_head_of_the_line() {
    let server = Server::fresh("lease-line-try", &[PRELOAD]);
    server.create_database();
    let mut admin = server.connect(DATABASE);
    let ns = 7802;
    let mut holder = server.connect(DATABASE);
    let held_token = try_lease(&mut holder, ns, "holder").expect("a free lease");

    let (granted_to, granted) = channel();
    let waiter = Waiter::start(&server, &mut admin, 1, ns, &granted_to);
    let head = in_line(&mut admin, ns)
        .1
        .expect("the waiter heads the line");
    let stopped = Stopped::new(head as u32);
    release(&mut holder, ns, held_token);
    let mut other = server.connect(DATABASE);
    assert_eq!(
        try_lease(&mut other, ns, "other"),
        None,
        "free, but the head's"
    );
    let held: i64 = admin
        .query_one(
            "SELECT count(*) FROM fenced_leases WHERE ns = $1 AND id = 1 AND owner IS NOT NULL",
            &[&ns],
        )
        .unwrap()
        .get(0);
    assert_eq!(held, 0, "the lease was released");
    drop(stopped);

    let grant = next_grant(&granted, GRANT_WAIT);
    assert_eq!(grant.waiter, 1);
    assert!(grant.token > held_token, "{grant:?} above {held_token}");
    assert_eq!(
        try_lease(&mut other, ns, "other"),
        None,
        "held by the waiter"
    );
    waiter.release();
    let token = try_lease(&mut other, ns, "other").expect("nobody in line: taken at once");
    assert!(token > grant.token);
}
