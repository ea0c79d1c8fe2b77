//! A leader-election loop on fenced_lock, in two modes.
//!
//! Session lock (default): each instance keeps one dedicated connection (never a
//! transaction-mode pooler: the lock is that connection's). It tries
//! `try_acquire_fenced_session` for its owner; the leader does its work through
//! `fenced_update_or_false` with its term as the fencing token and checks `current_fence` before each step; it steps down as soon as either says it lost
//! the lock. A leader whose connection is cut behaves like a paused process: after
//! `--pause-ms` it wakes up and tries one more write with its old term, which a newer leader's
//! writes have fenced off.
//!
//! Lease (`--lease TTL_MS`): works through any pooler, every statement in a transaction of its
//! own. Followers wait in `acquire_lease` (woken by a release, or at the holder's expiry); the
//! leader renews every TTL/3, steps down when `renew_lease` returns NULL, and writes with its
//! token. A leader process that dies keeps the lease until its TTL runs out.
//!
//! The fenced work goes to the lock's own database, or with `--resource-url` to another server
//! (as under an HA manager, where the resource must not fail over with the lock).
//!
//! Usage: fenced_leader --url URL --name NAME [--ns 4242 --id 1 --seconds 10 --pause-ms 1500
//!        --lease TTL_MS --resource-url URL]
//! Prints one line per event: `LEADER name term pid`, `WORK name term accepted|superseded`,
//! `STEPDOWN name term reason`, `LATE name term accepted|refused` (pid: the backend's for a
//! session lock, this process's for a lease). A lease's LEADER line adds when it was acquired
//! and when it expires, and each renewal prints `RENEW name term expires` (seconds since the
//! epoch, on the database's clock).

use postgres::{Client, NoTls};
use std::time::{Duration, Instant};

struct Options {
    url: String,
    name: String,
    ns: i32,
    id: i32,
    seconds: u64,
    pause_ms: u64,
    /// Lease mode, with this TTL (ms).
    lease_ms: Option<u64>,
    /// Where the fenced work goes, when not to the lock's database.
    resource_url: Option<String>,
}

fn options() -> Options {
    let mut options = Options {
        url: String::new(),
        name: String::from("leader"),
        ns: 4242,
        id: 1,
        seconds: 10,
        pause_ms: 1500,
        lease_ms: None,
        resource_url: None,
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
            "--lease" => options.lease_ms = Some(value.parse().expect("--lease takes ms")),
            "--resource-url" => options.resource_url = Some(value),
            other => panic!("unknown option {other}"),
        }
    }
    assert!(!options.url.is_empty(), "--url is required");
    options
}

/// One statement in a transaction of its own, its first value: behind a transaction-mode
/// pooler a statement must be prepared and run on one server connection.
fn one<T: for<'a> postgres::types::FromSql<'a>>(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<T, postgres::Error> {
    let mut transaction = client.transaction()?;
    let value = transaction.query_one(sql, params)?.get(0);
    transaction.commit()?;
    Ok(value)
}

/// One fenced step of the leader's work: true when the write was accepted.
fn work(client: &mut Client, o: &Options, term: i64, beat: i32) -> Result<bool, postgres::Error> {
    one(
        client,
        // $1 is cast: fenced_update's id is polymorphic and this driver sends untyped parameters.
        "SELECT fenced_update_or_false('leader_work', $1::int, $2, \
         jsonb_build_object('leader', $3::text, 'beat', $4::int))",
        &[&o.id, &term, &o.name, &beat],
    )
}

/// Where the fenced work is written: the lock's own connection, or a server of its own
/// (`--resource-url`), connected on first use and again after it was lost.
struct Resource {
    url: Option<String>,
    client: Option<Client>,
}

impl Resource {
    fn new(o: &Options) -> Resource {
        Resource {
            url: o.resource_url.clone(),
            client: None,
        }
    }

    fn write(
        &mut self,
        lock: &mut Client,
        o: &Options,
        term: i64,
        beat: i32,
    ) -> Result<bool, postgres::Error> {
        let Some(url) = &self.url else {
            return work(lock, o, term, beat);
        };
        let client = match self.client.take() {
            Some(client) if !client.is_closed() => self.client.insert(client),
            _ => self.client.insert(Client::connect(url, NoTls)?),
        };
        work(client, o, term, beat)
    }
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
    match o.lease_ms {
        Some(ttl_ms) => lease_loop(&o, ttl_ms),
        None => session_loop(&o),
    }
}

/// A leader's work until it ends: before each fenced step, `still_leading` (false: the lease
/// or lock is lost); at the deadline, `release`. Why it ended.
fn lead(
    client: &mut Client,
    resource: &mut Resource,
    o: &Options,
    term: i64,
    deadline: Instant,
    mut still_leading: impl FnMut(&mut Client) -> Result<bool, postgres::Error>,
    release: impl FnOnce(&mut Client),
) -> &'static str {
    let mut beat = 0;
    loop {
        if Instant::now() >= deadline {
            release(client);
            return "done";
        }
        match still_leading(client) {
            Ok(true) => {}
            Ok(false) => return "lease lost",
            Err(error) => return lost_or_failed(client, o, &error),
        }
        beat += 1;
        match resource.write(client, o, term, beat) {
            Ok(true) => println!("WORK {} {term} accepted", o.name),
            Ok(false) => {
                println!("WORK {} {term} superseded", o.name);
                return "superseded";
            }
            Err(error) => return lost_or_failed(client, o, &error),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The leader loop on a table-backed lease.
fn lease_loop(o: &Options, ttl_ms: u64) {
    let mut resource = Resource::new(o);
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let owner = format!("{}:{}", o.name, std::process::id());
    let ttl = ttl_ms as f64 / 1000.0;
    let (acquire, renew, release) = (
        "SELECT acquire_lease($1, $2, $3, make_interval(secs => $4), make_interval(secs => $4))",
        "SELECT extract(epoch FROM renew_lease($1, $2, $3, make_interval(secs => $4)))::float8",
        "SELECT release_lease($1, $2, $3)",
    );
    while Instant::now() < deadline {
        let Ok(mut client) = Client::connect(&o.url, NoTls) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        // Follower: wait up to one TTL for a release or the holder's expiry, then again.
        let token: Option<i64> = match one(&mut client, acquire, &[&o.ns, &o.id, &owner, &ttl]) {
            Ok(token) => token,
            Err(_) => continue,
        };
        let Some(token) = token else { continue };
        // When the lease began and ends, on the database's clock ("? ?" if that read failed).
        let validity = one::<String>(
            &mut client,
            "SELECT extract(epoch FROM acquired_at) || ' ' || extract(epoch FROM expires_at) \
             FROM fenced_leases WHERE ns = $1 AND id = $2 AND token = $3",
            &[&o.ns, &o.id, &token],
        )
        .unwrap_or_else(|_| "? ?".into());
        println!(
            "LEADER {} {token} {} {validity}",
            o.name,
            std::process::id()
        );
        // Renewed every TTL/3; a renewal that returns NULL means the lease is lost.
        let mut renewed_at = Instant::now();
        let still_leading = |client: &mut Client| {
            if renewed_at.elapsed() < Duration::from_millis(ttl_ms / 3) {
                return Ok(true);
            }
            let expires = one::<Option<f64>>(client, renew, &[&o.ns, &o.id, &token, &ttl])?;
            renewed_at = Instant::now();
            if let Some(expires) = expires {
                println!("RENEW {} {token} {expires:.6}", o.name);
            }
            Ok(expires.is_some())
        };
        let release = |client: &mut Client| {
            let _: Result<bool, _> = one(client, release, &[&o.ns, &o.id, &token]);
        };
        let reason = lead(
            &mut client,
            &mut resource,
            o,
            token,
            deadline,
            still_leading,
            release,
        );
        println!("STEPDOWN {} {token} {reason}", o.name);
    }
}

/// The leader loop on a session lock, on a dedicated connection.
fn session_loop(o: &Options) {
    let mut resource = Resource::new(o);
    let owner = format!("{}:{}", o.name, std::process::id());
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    while Instant::now() < deadline {
        let Ok(mut client) = Client::connect(&o.url, NoTls) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let _ = client.batch_execute(&format!("SET application_name = '{}'", o.name));
        // Follower: try to lead every 100 ms.
        let term: Option<i64> = match one(
            &mut client,
            "SELECT try_acquire_fenced_session($1, $2, $3)",
            &[&o.ns, &o.id, &owner],
        ) {
            Ok(term) => term,
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
        // Still the leader while this session holds the key with this term.
        let still_leading = |client: &mut Client| {
            let held = one::<Option<i64>>(
                client,
                "SELECT current_fence($1, $2, $3)",
                &[&o.ns, &o.id, &owner],
            );
            held.map(|held| held == Some(term))
        };
        let release = |client: &mut Client| {
            let release = "SELECT release_fenced($1, $2, $3)";
            let _: Result<bool, _> = one(client, release, &[&o.ns, &o.id, &owner]);
        };
        let reason = lead(
            &mut client,
            &mut resource,
            o,
            term,
            deadline,
            still_leading,
            release,
        );
        println!("STEPDOWN {} {term} {reason}", o.name);
        if reason == "connection lost" {
            // Like a process that was paused while its lease ran out: it wakes up later and
            // writes with the term it still believes in.
            std::thread::sleep(Duration::from_millis(o.pause_ms));
            if let Ok(mut late) = Client::connect(&o.url, NoTls) {
                if let Ok(accepted) = resource.write(&mut late, o, term, -1) {
                    let verdict = if accepted { "accepted" } else { "refused" };
                    println!("LATE {} {term} {verdict}", o.name);
                }
            }
        }
    }
}
