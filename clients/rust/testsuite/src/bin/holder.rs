//! A lease holder in a process of its own, for the fault tests: `holder DSN NS ID TTL_MS ROW`
//! takes the lease and prints "token N"; then, as a careful holder does, checks the lease
//! before each step of its work; once it finds the lease lost it prints "lost REASON" and
//! tries its write anyway with its token (row ROW of documents), printing "refused OFFERED
//! ACCEPTED" or "written".

use std::time::Duration;

use fenced_lock::{acquire_lease, fenced_update, ErrorKind, LeaseOptions};
use tokio_postgres::NoTls;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let config: tokio_postgres::Config = args[1].parse().unwrap();
    let (ns, id, ttl, row): (i32, i32, u64, i32) = (
        args[2].parse().unwrap(),
        args[3].parse().unwrap(),
        args[4].parse().unwrap(),
        args[5].parse().unwrap(),
    );
    let options = LeaseOptions::new(Duration::from_millis(ttl));
    let lease = acquire_lease(&config, NoTls, ns, id, options)
        .await
        .unwrap();
    println!("token {}", lease.token());
    let lost = loop {
        if let Err(lost) = lease.check() {
            break lost;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!("lost {}", lost.reason().unwrap());
    let (client, connection) = config.connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    let changes = serde_json::json!({"body": "paused holder"});
    match fenced_update(&client, "documents", row, lease.token(), &changes).await {
        Ok(()) => println!("written"),
        Err(error) if error.kind() == ErrorKind::StaleToken => {
            let stale = error.stale().unwrap();
            println!("refused {} {}", stale.offered.unwrap(), stale.accepted);
        }
        Err(error) => panic!("{error}"),
    }
    let _ = lease.release().await;
}
