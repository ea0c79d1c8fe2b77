//! Continuity across pg_dump / pg_restore: the first token in the restored database is
//! larger than every token issued before the dump, and the fence ledger comes along.

use fenced_lock_faults::{report, violations_across_epochs, Server, DATABASE};
use std::process::Command;

#[test]
fn restored_database_continues_above_every_earlier_token() {
    let server = Server::fresh("dump-restore", &[]);
    server.create_database();
    let mut client = server.connect(DATABASE);
    let mut before: Vec<i64> = Vec::new();
    for key in 0..200 {
        let mut tx = client.transaction().unwrap();
        before.push(
            tx.query_one("SELECT acquire_fenced(5, $1)", &[&key])
                .unwrap()
                .get(0),
        );
        if key % 2 == 0 {
            tx.commit().unwrap();
        } else {
            tx.rollback().unwrap();
        }
    }

    let highest: i64 = *before.iter().max().unwrap();
    let recorded: bool = client
        .query_one(
            "SELECT fence_check_or_false('external-resource', $1)",
            &[&highest],
        )
        .unwrap()
        .get(0);
    assert!(recorded);

    let dump = format!("{}/fenced_faults.dump", server.dir);
    let connection = ["-h", server.socket_dir.as_str(), "-U", "postgres"];
    let bin = "/usr/lib/postgresql/15/bin";
    let dumped = Command::new(format!("{bin}/pg_dump"))
        .args(connection)
        .args(["--format=custom", "--file", &dump, DATABASE])
        .status()
        .unwrap();
    assert!(dumped.success(), "pg_dump");
    server
        .connect("postgres")
        .batch_execute("CREATE DATABASE fenced_restored")
        .unwrap();
    let restored = Command::new(format!("{bin}/pg_restore"))
        .args(connection)
        .args(["--exit-on-error", "--dbname", "fenced_restored", &dump])
        .status()
        .unwrap();
    assert!(restored.success(), "pg_restore");

    let mut restored_client = server.connect("fenced_restored");
    let mut after = Vec::new();
    for key in 0..10 {
        let mut tx = restored_client.transaction().unwrap();
        after.push(
            tx.query_one("SELECT acquire_fenced(5, $1)", &[&key])
                .unwrap()
                .get(0),
        );
        tx.commit().unwrap();
    }
    // The restored ledger still refuses the tokens it refused before the dump.
    let stale_refused: bool = !restored_client
        .query_one(
            "SELECT fence_check_or_false('external-resource', $1)",
            &[&(highest - 1)],
        )
        .unwrap()
        .get::<_, bool>(0);
    assert!(stale_refused, "the ledger row was not restored");

    let epochs = [before, after];
    let violations = violations_across_epochs(&epochs);
    report("dump/restore", 210, 1, 210, violations);
    assert_eq!(violations, 0);
}
