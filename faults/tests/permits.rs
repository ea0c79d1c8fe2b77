//! Fenced counting semaphores under several real clients: waiters are granted in arrival
//! order, a smaller permit count grants no slot above it while holders above it finish, a
//! killed session holder's slot goes to the head of the line with a larger token, so the dead
//! holder's late write is refused, and so is that of a lease permit's holder paused (SIGSTOP)
//! past its TTL.

use fenced_lock_faults::{next_grant, no_grant, signal, until, Server, DATABASE};
use postgres::{Client, NoTls};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Sender};
use std::thread;
use std::time::Duration;

const PRELOAD: &str = "shared_preload_libraries=fenced_lock";

/// How long a grant the test expects may take to show (a woken waiter, a killed backend's exit).
const GRANT_WAIT: Duration = Duration::from_secs(20);

/// One permit granted to a waiter: which waiter, its slot and token.
#[derive(Debug, PartialEq)]
struct Granted {
    waiter: usize,
    slot: i32,
    token: i64,
}

/// A client waiting for a permit in its own transaction; it commits when told to.
struct Waiter {
    commit: Sender<()>,
    done: thread::JoinHandle<()>,
}

impl Waiter {
    /// Starts waiter `waiter` asking for one of `permits` permits of (ns, id); its grant goes
    /// to `granted`. Returns once it waits in the key's line (`admin` counts the waiting rows
    /// of fenced_locks).
    fn start(
        server: &Server,
        admin: &mut Client,
        waiter: usize,
        (ns, id, permits): (i32, i32, i32),
        granted: &Sender<Granted>,
    ) -> Waiter {
        let waiting_before = waiting(admin, ns);
        let (commit, told) = channel::<()>();
        let (url, granted) = (server.url(DATABASE), granted.clone());
        let done = thread::spawn(move || {
            let mut client = Client::connect(&url, NoTls).unwrap();
            let mut transaction = client.transaction().unwrap();
            let row = transaction
                .query_one(
                    "SELECT slot, token FROM acquire_permit($1, $2, $3)",
                    &[&ns, &id, &permits],
                )
                .unwrap();
            let (slot, token) = (row.get(0), row.get(1));
            granted
                .send(Granted {
                    waiter,
                    slot,
                    token,
                })
                .unwrap();
            told.recv().unwrap();
            transaction.commit().unwrap();
        });
        until(admin, "the waiter to line up", GRANT_WAIT, |admin| {
            waiting(admin, ns) == waiting_before + 1
        });
        Waiter { commit, done }
    }

    fn commit(self) {
        self.commit.send(()).unwrap();
        self.done.join().unwrap();
    }
}

/// The waiting rows of fenced_locks for namespace `ns`.
fn waiting(admin: &mut Client, ns: i32) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM fenced_locks WHERE ns = $1 AND NOT granted",
            &[&ns],
        )
        .unwrap()
        .get(0)
}

/// A session holding a permit of (ns, id): its slot and token.
fn hold(server: &Server, (ns, id, permits): (i32, i32, i32)) -> (Client, i32, i64) {
    let mut client = server.connect(DATABASE);
    let row = client
        .query_one(
            "SELECT slot, token FROM acquire_permit_session($1, $2, $3)",
            &[&ns, &id, &permits],
        )
        .unwrap();
    (client, row.get(0), row.get(1))
}

fn release(holder: &mut Client, (ns, id): (i32, i32), slot: i32) {
    let released: bool = holder
        .query_one("SELECT release_permit($1, $2, $3)", &[&ns, &id, &slot])
        .unwrap()
        .get(0);
    assert!(released, "slot {slot} of ({ns}, {id}) released");
}

/// Three waiters behind two holders are granted in the order they arrived, each the slot that
/// came free, with tokens rising in grant order above the holders'.
#[test]
fn waiters_are_granted_in_arrival_order() {
    let server = Server::fresh("permits-order", &[PRELOAD]);
    server.create_database();
    let mut admin = server.connect(DATABASE);
    let key = (7701, 1, 2);
    let (mut first, first_slot, first_token) = hold(&server, key);
    let (mut second, second_slot, second_token) = hold(&server, key);
    assert_eq!((first_slot, second_slot), (1, 2));

    let (granted_to, granted) = channel();
    let mut waiters: Vec<Waiter> = (1..=3)
        .map(|waiter| Waiter::start(&server, &mut admin, waiter, key, &granted_to))
        .collect();
    no_grant(&granted);

    release(&mut first, (7701, 1), 1);
    let one = next_grant(&granted, GRANT_WAIT);
    assert_eq!((one.waiter, one.slot), (1, 1), "{one:?}");
    no_grant(&granted);
    release(&mut second, (7701, 1), 2);
    let two = next_grant(&granted, GRANT_WAIT);
    assert_eq!((two.waiter, two.slot), (2, 2), "{two:?}");
    // The first waiter's commit frees slot 1 for the last.
    waiters.remove(0).commit();
    let three = next_grant(&granted, GRANT_WAIT);
    assert_eq!((three.waiter, three.slot), (3, 1), "{three:?}");

    assert!(second_token > first_token);
    assert!(one.token > second_token, "{one:?} above {second_token}");
    assert!(two.token > one.token && three.token > two.token);
    waiters.into_iter().for_each(Waiter::commit);
    assert_eq!(waiting(&mut admin, 7701), 0);
}

/// Callers that now ask for two permits where three were taken: the holder of slot 3 keeps it
/// until it releases, and its release grants nothing (slot 3 is above the count); the next
/// release of a slot within it does.
#[test]
fn a_smaller_count_grants_no_slot_above_it() {
    let server = Server::fresh("permits-shrink", &[PRELOAD]);
    server.create_database();
    let mut admin = server.connect(DATABASE);
    let mut holders: Vec<(Client, i32, i64)> =
        (0..3).map(|_| hold(&server, (7702, 1, 3))).collect();
    let slots: Vec<i32> = holders.iter().map(|(_, slot, _)| *slot).collect();
    assert_eq!(slots, [1, 2, 3]);

    let (granted_to, granted) = channel();
    let waiter = Waiter::start(&server, &mut admin, 1, (7702, 1, 2), &granted_to);
    let (mut third, _, _) = holders.pop().unwrap();
    release(&mut third, (7702, 1), 3);
    no_grant(&granted);
    assert_eq!(waiting(&mut admin, 7702), 1);

    let (first, _, first_token) = &mut holders[0];
    let first_token = *first_token;
    release(first, (7702, 1), 1);
    let one = next_grant(&granted, GRANT_WAIT);
    assert_eq!(one.slot, 1, "{one:?}");
    assert!(one.token > first_token);
    waiter.commit();
}

/// A session permit holder whose backend is terminated loses its slot to the head of the
/// line, which gets a larger token; the resource, keyed by slot, then refuses the dead
/// holder's token.
#[test]
fn a_killed_holders_slot_is_reused_and_its_write_refused() {
    let server = Server::fresh("permits-killed", &[PRELOAD]);
    server.create_database();
    let mut admin = server.connect(DATABASE);
    admin
        .batch_execute("CREATE TABLE partitions (id int PRIMARY KEY, fence bigint, worker text)")
        .unwrap();
    admin
        .batch_execute("INSERT INTO partitions VALUES (1, NULL, NULL)")
        .unwrap();
    let (mut holder, slot, old_token) = hold(&server, (7703, 1, 1));
    assert_eq!(slot, 1);
    let write = |client: &mut Client, token: i64, worker: &str| -> bool {
        client
            .query_one(
                &format!(
                    "SELECT fenced_update_or_false('partitions', '1', {token}, \
                     jsonb_build_object('worker', '{worker}'))"
                ),
                &[],
            )
            .unwrap()
            .get(0)
    };
    assert!(write(&mut holder, old_token, "old"));
    let pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);

    let (granted_to, granted) = channel();
    let waiter = Waiter::start(&server, &mut admin, 1, (7703, 1, 1), &granted_to);
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    let new = next_grant(&granted, GRANT_WAIT);
    assert_eq!(new.slot, 1);
    assert!(new.token > old_token);
    assert!(write(&mut admin, new.token, "new"));
    waiter.commit();

    // The old holder, paused rather than dead in real life, writes with its token: refused.
    assert!(!write(&mut admin, old_token, "old again"));
    let worker: String = admin
        .query_one("SELECT worker FROM partitions WHERE id = 1", &[])
        .unwrap()
        .get(0);
    assert_eq!(worker, "new");
}

/// A lease permit's holder, a psql process, is paused (SIGSTOP) while it works with its
/// permit; its TTL runs out and a waiting owner gets the slot with a larger token and writes.
/// Resumed, the holder writes with its old token: refused; and its renewal finds the lease lost.
#[test]
fn a_paused_lease_permit_holder_is_refused_after_its_slot_is_reused() {
    let server = Server::fresh("permits-paused-lease", &[PRELOAD]);
    server.create_database();
    let mut admin = server.connect(DATABASE);
    admin
        .batch_execute(
            "CREATE TABLE partitions (id int PRIMARY KEY, fence bigint, worker text);
             INSERT INTO partitions VALUES (1, NULL, NULL);",
        )
        .unwrap();
    let mut holder = Command::new("/usr/lib/postgresql/15/bin/psql")
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1", &server.url(DATABASE)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("psql starts");
    holder
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"SELECT slot, token FROM try_acquire_lease_permit(7704, 1, 1, 'paused', '300 ms') \\gset
SELECT pg_sleep(0.2);
SELECT 'written=' || fenced_update_or_false('partitions', :slot, :token, '{\"worker\": \"paused\"}');
SELECT 'renewed=' || (renew_lease(7704, 1, :token, '300 ms') IS NOT NULL);
SELECT 'token=' || :token;
",
        )
        .unwrap();
    until(&mut admin, "the holder's lease", GRANT_WAIT, |admin| {
        let held: i64 = admin
            .query_one(
                "SELECT count(*) FROM fenced_leases WHERE ns = 7704 AND owner = 'paused'",
                &[],
            )
            .unwrap()
            .get(0);
        held == 1
    });
    signal(holder.id(), "STOP");

    // The successor waits for the slot: granted once the paused holder's TTL runs out.
    let mut successor = server.connect(DATABASE);
    let row = successor
        .query_one(
            "SELECT slot, token FROM acquire_lease_permit(7704, 1, 1, 'successor', '1 minute', '20 s')",
            &[],
        )
        .unwrap();
    let (slot, token): (i32, i64) = (row.get(0), row.get(1));
    assert_eq!(slot, 1);
    let written: bool = successor
        .query_one(
            "SELECT fenced_update_or_false('partitions', $1::int::text, $2, '{\"worker\": \"successor\"}')",
            &[&slot, &token],
        )
        .unwrap()
        .get(0);
    assert!(written);

    signal(holder.id(), "CONT");
    let output = holder.wait_with_output().unwrap();
    assert!(output.status.success(), "psql ran its script");
    let printed = String::from_utf8(output.stdout).unwrap();
    let old_token: i64 = printed
        .lines()
        .find_map(|line| line.strip_prefix("token="))
        .expect("the holder printed its token")
        .parse()
        .unwrap();
    assert!(token > old_token, "{token} above {old_token}");
    assert!(printed.contains("written=false"), "{printed}");
    assert!(printed.contains("renewed=false"), "{printed}");
    let worker: String = admin
        .query_one("SELECT worker FROM partitions WHERE id = 1", &[])
        .unwrap()
        .get(0);
    assert_eq!(worker, "successor");
}

/// A waiting lease permit acquire is granted the slot a release frees (with a larger token),
/// long before the holder's TTL would have run out.
#[test]
fn a_released_lease_permit_goes_to_its_waiter() {
    let server = Server::fresh("permits-lease-wait", &[PRELOAD]);
    server.create_database();
    let mut holder = server.connect(DATABASE);
    let row = holder
        .query_one(
            "SELECT slot, token FROM try_acquire_lease_permit(7705, 1, 1, 'holder', '1 hour')",
            &[],
        )
        .unwrap();
    let (slot, held_token): (i32, i64) = (row.get(0), row.get(1));
    assert_eq!(slot, 1);
    let url = server.url(DATABASE);
    let waiter = thread::spawn(move || {
        let mut client = Client::connect(&url, NoTls).unwrap();
        let row = client
            .query_one(
                "SELECT slot, token FROM acquire_lease_permit(7705, 1, 1, 'waiter', '1 minute', '1 hour')",
                &[],
            )
            .unwrap();
        (row.get::<_, i32>(0), row.get::<_, i64>(1))
    });
    let mut admin = server.connect(DATABASE);
    until(&mut admin, "the waiter to wait", GRANT_WAIT, |admin| {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE query LIKE '%''waiter''%' AND wait_event_type = 'Extension'",
                &[],
            )
            .unwrap()
            .get(0);
        waiting == 1
    });
    let released: bool = holder
        .query_one("SELECT release_lease(7705, 1, $1)", &[&held_token])
        .unwrap()
        .get(0);
    assert!(released);
    let (slot, token) = waiter.join().unwrap();
    assert_eq!(slot, 1);
    assert!(token > held_token);
}
