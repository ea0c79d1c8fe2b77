//! Leases taken with `synchronous_commit = off` (the opt-in that lets a lease call return before
//! its commit is flushed): a crash can lose the lease, never its token. The lease is taken with
//! the WAL writer stopped and the background writer off, so nothing flushes its commit; a crash
//! (the WAL writer killed) then loses it. After recovery the old holder is told it has no lease
//! (its renewal returns NULL), the key goes to the next owner with a larger token, and the
//! resource refuses the old holder's write once the new holder has written.

use fenced_lock_faults::{signal, Server, DATABASE};
use postgres::Client;

fn lease(client: &mut Client, owner: &str) -> Option<i64> {
    client
        .query_one("SELECT try_acquire_lease(7901, 1, $1, '1 min')", &[&owner])
        .unwrap()
        .get(0)
}

fn write(client: &mut Client, token: i64, writer: &str) -> bool {
    client
        .query_one(
            "SELECT fenced_update_or_false('jobs', '1', $1, jsonb_build_object('writer', $2::text))",
            &[&token, &writer],
        )
        .unwrap()
        .get(0)
}

#[test]
fn a_crash_can_lose_an_unflushed_lease_but_never_its_token() {
    let server = Server::fresh(
        "lease-async-commit",
        &[
            "shared_preload_libraries=fenced_lock",
            // No page of the lease table is written (and the WAL before it flushed) meanwhile.
            "bgwriter_lru_maxpages=0",
            "checkpoint_timeout=1h",
        ],
    );
    server.create_database();
    let mut admin = server.connect(DATABASE);
    admin
        .batch_execute(
            "CREATE TABLE jobs (id int PRIMARY KEY, fence bigint, writer text);
             INSERT INTO jobs VALUES (1, NULL, NULL); CHECKPOINT",
        )
        .unwrap();
    let wal_writer: i32 = admin
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'",
            &[],
        )
        .unwrap()
        .get(0);

    let mut old = server.connect(DATABASE);
    old.batch_execute("SET synchronous_commit = off").unwrap();
    signal(wal_writer as u32, "STOP");
    let old_token = lease(&mut old, "old").expect("a free lease");
    // A crash: the postmaster resets every process when one dies by a signal.
    signal(wal_writer as u32, "KILL");
    server.wait_writable();

    let mut old = server.connect(DATABASE);
    let renewed: bool = old
        .query_one(
            "SELECT renew_lease(7901, 1, $1, '1 min') IS NOT NULL",
            &[&old_token],
        )
        .unwrap()
        .get(0);
    assert!(!renewed, "the unflushed lease was lost: its holder is told");
    let mut new = server.connect(DATABASE);
    let new_token = lease(&mut new, "new").expect("the lost lease is free");
    assert!(
        new_token > old_token,
        "{new_token} above {old_token}: the token was durable"
    );
    assert!(write(&mut new, new_token, "new"));
    assert!(
        !write(&mut old, old_token, "old"),
        "the old holder's write is refused"
    );
    let writer: String = new
        .query_one("SELECT writer FROM jobs WHERE id = 1", &[])
        .unwrap()
        .get(0);
    assert_eq!(writer, "new");
}
