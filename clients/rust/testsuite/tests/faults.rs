//! Faults on real processes: a holder paused past its ttl, its link cut or blackholed. Each
//! ends with the holder told, and nothing taken again behind its back. (The server restart is
//! in restart.rs, the last test binary.)

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fenced_lock::{acquire_lease, fenced_update, try_acquire_lease, LeaseOptions, LOST_DEADLINE};
use fenced_lock_testsuite::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio_postgres::NoTls;

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status();
    assert!(status.unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder() {
    // SIGSTOP past the ttl: a successor takes the lease and writes; on resume the holder finds
    // the lease lost before any renewal (by its validity, on its monotonic clock), and its write
    // with the old token is refused.
    let (id, row) = (new_id(), doc_id().await);
    let mut holder = Command::new(env!("CARGO_BIN_EXE_holder"))
        .args([
            dsn("direct"),
            NS.to_string(),
            id.to_string(),
            "2000".into(),
            row.to_string(),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let token: i64 = first.strip_prefix("token ").unwrap().parse().unwrap();
    let pid = holder.id().unwrap();
    signal(pid, "STOP");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let successor = acquire_lease(
        &config("direct"),
        NoTls,
        NS,
        id,
        LeaseOptions::new(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    let client = connect("direct").await;
    let changes = serde_json::json!({"body": "successor"});
    fenced_update(&client, "documents", row, successor.token(), &changes)
        .await
        .unwrap();
    signal(pid, "CONT");
    let mut output = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
    {
        output.push(line);
    }
    assert!(holder.wait().await.unwrap().success(), "{output:?}");
    assert!(
        output.contains(&format!("lost {LOST_DEADLINE}")),
        "{output:?}"
    );
    assert!(
        output.contains(&format!("refused {token} {}", successor.token())),
        "{output:?}"
    );
    assert_eq!(body(row).await.as_deref(), Some("successor"));
    successor.release().await.unwrap();
}

/// scripts/tcp_proxy.py on 127.0.0.1 in front of the test server's socket.
struct Proxy {
    process: tokio::process::Child,
    dsn: String,
}

impl Proxy {
    async fn start() -> Proxy {
        // A port below the ephemeral range (32768-60999), from a point that depends on this
        // process.
        let mut port = 21000 + (std::process::id() * 7) % 11000;
        while std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_err() {
            port = if port >= 32000 { 21000 } else { port + 1 };
        }
        let direct = dsn("direct");
        let host = direct
            .split_whitespace()
            .next()
            .unwrap()
            .strip_prefix("host=")
            .unwrap()
            .to_owned();
        let script = format!("{}/tcp_proxy.py", std::env::var("CLIENTS_SCRIPTS").unwrap());
        let process = Command::new("python3")
            .args([script, port.to_string(), format!("{host}/.s.PGSQL.5432")])
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let up = wait_until(Duration::from_secs(10), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port as u16))
                .await
                .is_ok()
        })
        .await;
        assert!(up, "the proxy did not start");
        let dsn = direct.replacen(
            &format!("host={host}"),
            &format!("host=127.0.0.1 port={port}"),
            1,
        );
        Proxy { process, dsn }
    }

    fn signal(&self, name: &str) {
        signal(self.process.id().unwrap(), name);
    }
}

async fn link_fault(fault: &str) {
    // The lease's connection reset (cut) or silent (blackhole: no byte passes either way): the
    // holder is told within the ttl, and the lease is not taken again with a new token.
    let (id, ttl) = (new_id(), Duration::from_secs(3));
    let proxy = Proxy::start().await;
    let reasons = Arc::new(Mutex::new(Vec::<String>::new()));
    let heard = Arc::clone(&reasons);
    let options = LeaseOptions::new(ttl).on_lost(move |r| heard.lock().unwrap().push(r.to_owned()));
    let through_proxy: tokio_postgres::Config = proxy.dsn.parse().unwrap();
    let lease = acquire_lease(&through_proxy, NoTls, NS, id, options)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await; // one renewal through the proxy first
    lease.check().unwrap();
    let faulted_at = Instant::now();
    proxy.signal(if fault == "cut" { "USR1" } else { "HUP" });
    assert!(
        cancelled_within(&lease.lost_signal(), ttl).await,
        "not told within the ttl"
    );
    let told_after = faulted_at.elapsed();
    let reason = reasons.lock().unwrap()[0].clone();
    if fault == "cut" {
        assert!(reason.contains("connection"), "{reason}");
        assert!(
            told_after < ttl / 3 + Duration::from_secs(1),
            "{told_after:?}"
        );
    } else {
        assert_eq!(reason, LOST_DEADLINE);
    }
    proxy.signal("USR2");
    // The server still has the lease under its one token until it expires; nobody renewed it
    // under another.
    let token = lease.token();
    assert!(lease_row(id).await.is_none_or(|row| row.0 == token));
    lease.release().await.unwrap();
    let succeeded = wait_until(ttl + Duration::from_secs(2), || async {
        let options = LeaseOptions::new(Duration::from_secs(1));
        match try_acquire_lease(&config("direct"), NoTls, NS, id, options)
            .await
            .unwrap()
        {
            Some(next) => next.token() > token && next.release().await.is_ok(),
            None => false,
        }
    })
    .await;
    assert!(succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_fault_cut() {
    link_fault("cut").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_fault_blackhole() {
    link_fault("blackhole").await
}
