//! Shared pieces of the fault suite: real PostgreSQL servers started through `scripts/pg.sh`
//! (as the `postgres` user, each on a Unix socket in its own directory, no TCP port), clients, a storm of acquisitions, and the token
//! invariants every test checks.

use postgres::{Client, NoTls};
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

pub const DATABASE: &str = "fenced_faults";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn pg_sh(args: &[&str]) -> String {
    pg_sh_with(args, &[])
}

/// scripts/pg.sh with `environment` added to its own (and so to the server it starts).
fn pg_sh_with(args: &[&str], environment: &[(String, String)]) -> String {
    let output = Command::new(repo_root().join("scripts/pg.sh"))
        .args(args)
        .envs(environment.iter().map(|(name, value)| (name, value)))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("scripts/pg.sh runs");
    assert!(output.status.success(), "scripts/pg.sh {args:?} failed");
    String::from_utf8(output.stdout).expect("pg.sh prints UTF-8")
}

/// Now, a second early: a bound for /dev/shm's file times, which are coarser than the clock.
pub fn shm_clock_now() -> SystemTime {
    SystemTime::now() - Duration::from_secs(1)
}

/// libfaketime's shared memory and semaphore (/dev/shm, named after the pid of the process
/// that made them) made since `since` by processes that no longer run. The library removes
/// them when their maker exits normally, yet a server started through it and stopped with
/// pg_ctl leaves one pair (as does a process a signal ends), and they would outlive the suite.
pub fn faketime_leftovers(since: SystemTime) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    (entries.flatten())
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let maker = (name.strip_prefix("faketime_shm_"))
                .or_else(|| name.strip_prefix("sem.faketime_sem_"))
                .and_then(|pid| pid.parse::<u32>().ok());
            let made = entry.metadata().and_then(|meta| meta.modified());
            match (maker, made) {
                (Some(pid), Ok(made)) => {
                    made >= since && !PathBuf::from(format!("/proc/{pid}")).exists()
                }
                _ => false,
            }
        })
        .map(|entry| entry.path())
        .collect()
}

/// One PostgreSQL server of the suite, stopped when dropped.
pub struct Server {
    pub dir: String,
    /// The directory of its Unix socket: libpq's `host`.
    pub socket_dir: String,
    settings: Vec<String>,
    /// Added to the server's environment at every start (libfaketime's, say).
    environment: Vec<(String, String)>,
    /// When its directory was wiped: what libfaketime left since then is this server's.
    created: SystemTime,
}

impl Server {
    /// A server `name` whose directory was stopped and wiped, not yet started.
    fn wiped(name: &str, settings: &[&str]) -> Server {
        let dir = repo_root().join("build/faults").join(name);
        let dir = dir.to_string_lossy().into_owned();
        let server = Server {
            socket_dir: pg_sh(&["socket", &dir]).trim().to_string(),
            dir,
            settings: settings.iter().map(|s| s.to_string()).collect(),
            environment: Vec::new(),
            created: shm_clock_now(),
        };
        pg_sh(&["stop", &server.dir]);
        let _ = std::fs::remove_dir_all(&server.dir);
        server
    }

    /// A fresh server (its directory is wiped first) with `settings` as `name=value`.
    pub fn fresh(name: &str, settings: &[&str]) -> Server {
        let server = Server::wiped(name, settings);
        server.start();
        server
    }

    /// A fresh server whose processes run with `environment` added to theirs.
    pub fn fresh_with(name: &str, settings: &[&str], environment: &[(&str, &str)]) -> Server {
        let mut server = Server::wiped(name, settings);
        server.set_environment(environment);
        server.start();
        server
    }

    /// The environment added at the server's next start (replacing what was added before).
    pub fn set_environment(&mut self, environment: &[(&str, &str)]) {
        self.environment = (environment.iter())
            .map(|&(name, value)| (name.to_string(), value.to_string()))
            .collect();
    }

    /// A fast shutdown (the server is started again by `start`).
    pub fn stop(&self) {
        pg_sh(&["stop", &self.dir]);
    }

    /// A hot standby streaming from `primary`, with `settings`.
    pub fn standby_of(primary: &Server, name: &str, settings: &[&str]) -> Server {
        let server = Server::wiped(name, settings);
        let mut args = vec![
            "standby".to_string(),
            server.dir.clone(),
            primary.dir.clone(),
        ];
        args.extend(
            server
                .settings
                .iter()
                .flat_map(|s| ["-c".to_string(), s.clone()]),
        );
        pg_sh(&args.iter().map(String::as_str).collect::<Vec<_>>());
        server
    }

    pub fn start(&self) {
        let mut args = vec!["start", self.dir.as_str()];
        for setting in &self.settings {
            args.push("-c");
            args.push(setting);
        }
        pg_sh_with(&args, &self.environment);
    }

    /// `pg_ctl stop -m immediate`: no checkpoint, no flush; recovery replays WAL on start.
    pub fn crash(&self) {
        pg_sh(&["crash", &self.dir]);
    }

    pub fn promote(&self) {
        pg_sh(&["promote", &self.dir]);
    }

    pub fn url(&self, database: &str) -> String {
        format!(
            "host={} user=postgres dbname={database} connect_timeout=10",
            self.socket_dir
        )
    }

    pub fn connect(&self, database: &str) -> Client {
        Client::connect(&self.url(database), NoTls).expect("connect to the test server")
    }

    /// Creates the suite's database with the extension.
    pub fn create_database(&self) {
        let mut admin = self.connect("postgres");
        admin
            .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
            .expect("create database");
        self.connect(DATABASE)
            .batch_execute("CREATE EXTENSION fenced_lock")
            .expect("create extension");
    }

    /// Waits until the server accepts connections and is out of recovery (after a crash
    /// restart or a promotion).
    pub fn wait_writable(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(mut client) = Client::connect(&self.url(DATABASE), NoTls) {
                if let Ok(row) = client.query_one("SELECT pg_is_in_recovery()", &[]) {
                    if !row.get::<_, bool>(0) {
                        return;
                    }
                }
            }
            assert!(Instant::now() < deadline, "server did not become writable");
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        pg_sh(&["stop", &self.dir]);
        for leftover in faketime_leftovers(self.created) {
            let _ = std::fs::remove_file(leftover);
        }
    }
}

/// PgBouncer in transaction mode in front of one database of a server (scripts/pg.sh bouncer),
/// on a socket of its own; stopped when dropped.
pub struct Bouncer {
    dir: String,
    socket_dir: String,
}

impl Bouncer {
    pub fn start(name: &str, server: &Server, database: &str) -> Bouncer {
        let dir = repo_root().join("build/faults").join(name);
        let dir = dir.to_string_lossy().into_owned();
        pg_sh(&["bouncer-stop", &dir]);
        pg_sh(&["bouncer", &dir, &server.dir, database]);
        Bouncer {
            socket_dir: pg_sh(&["socket", &dir]).trim().to_string(),
            dir,
        }
    }

    pub fn url(&self, database: &str) -> String {
        format!(
            "host={} user=postgres dbname={database} connect_timeout=10",
            self.socket_dir
        )
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        pg_sh(&["bouncer-stop", &self.dir]);
    }
}

/// A tiny deterministic generator, so runs are repeatable without a dependency.
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// How the storm's transactions end.
#[derive(Clone, Copy)]
pub enum Fates {
    /// Commit, roll back, or stay open briefly and commit, at random.
    Mixed,
    /// Always roll back. A commit asks the WAL writer to flush soon; a rollback of a
    /// transaction without an xid does not, so sequence WAL stays unflushed longest.
    RollbackOnly,
}

/// What a storm of acquisitions produced: every token a client received, and the PIDs of
/// the backends that served them.
#[derive(Default)]
pub struct StormResult {
    pub tokens: Vec<i64>,
    pub operations: u64,
}

/// Clients acquiring random keys until `stop` is set or their connection dies. Each grant is
/// committed, rolled back, or left open for a moment and then committed. Every token a
/// client received is recorded, whatever happened to its transaction afterwards.
pub struct Storm {
    stop: Arc<AtomicBool>,
    result: Arc<Mutex<StormResult>>,
    threads: Vec<thread::JoinHandle<()>>,
    pub backend_pids: Arc<Mutex<Vec<i32>>>,
}

impl Storm {
    pub fn start(server: &Server, clients: usize, seed: u64, fates: Fates) -> Storm {
        Storm::start_with_options(server, clients, seed, fates, "")
    }

    /// A storm whose clients connect with libpq `options` (e.g. `-c synchronous_commit=off`).
    pub fn start_with_options(
        server: &Server,
        clients: usize,
        seed: u64,
        fates: Fates,
        options: &str,
    ) -> Storm {
        let stop = Arc::new(AtomicBool::new(false));
        let result = Arc::new(Mutex::new(StormResult::default()));
        let backend_pids = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..clients)
            .map(|client_number| {
                let url = format!("{} options='{options}'", server.url(DATABASE));
                let (stop, result, pids) = (stop.clone(), result.clone(), backend_pids.clone());
                thread::spawn(move || {
                    let Ok(mut client) = Client::connect(&url, NoTls) else {
                        return;
                    };
                    if let Ok(row) = client.query_one("SELECT pg_backend_pid()", &[]) {
                        pids.lock().unwrap().push(row.get(0));
                    }
                    let mut rng = Lcg::new(seed * 1000 + client_number as u64);
                    while !stop.load(Ordering::Relaxed) {
                        let key = rng.below(64) as i32;
                        let fate = match fates {
                            Fates::Mixed => rng.below(3),
                            Fates::RollbackOnly => 1,
                        };
                        let Ok(token) = one_acquisition(&mut client, key, fate) else {
                            return; // the server went away: this client's storm is over
                        };
                        let mut result = result.lock().unwrap();
                        result.tokens.push(token);
                        result.operations += 1;
                    }
                })
            })
            .collect();
        Storm {
            stop,
            result,
            threads,
            backend_pids,
        }
    }

    /// Stops the clients (those still connected) and returns what they received.
    pub fn finish(self) -> StormResult {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().expect("storm client does not panic");
        }
        std::mem::take(&mut *self.result.lock().unwrap())
    }
}

/// One transaction: acquire, then commit (fate 0), roll back (1), or stay open briefly and
/// commit (2). Returns the token as soon as the client has it.
fn one_acquisition(client: &mut Client, key: i32, fate: u64) -> Result<i64, postgres::Error> {
    let mut transaction = client.transaction()?;
    let token: i64 = transaction
        .query_one("SELECT acquire_fenced(77, $1)", &[&key])?
        .get(0);
    match fate {
        0 => transaction.commit()?,
        1 => transaction.rollback()?,
        _ => {
            thread::sleep(Duration::from_millis(2));
            transaction.commit()?
        }
    }
    Ok(token)
}

/// Checks the promise across faults: every token received in an epoch (between two faults)
/// is larger than every token received in any earlier epoch, and no token is seen twice.
/// Returns the number of violations (tokens breaking either rule).
pub fn violations_across_epochs(epochs: &[Vec<i64>]) -> usize {
    let mut seen = HashSet::new();
    let mut highest_before: Option<i64> = None;
    let mut violations = 0;
    for epoch in epochs {
        for &token in epoch {
            if !seen.insert(token) || highest_before.is_some_and(|high| token <= high) {
                violations += 1;
            }
        }
        if let Some(&max) = epoch.iter().max() {
            highest_before = Some(highest_before.map_or(max, |high| high.max(max)));
        }
    }
    violations
}

/// The suite's figures line, the same shape for every test.
pub fn report(test: &str, operations: u64, faults: u64, tokens: usize, violations: usize) {
    println!(
        "{test}: operations={operations} faults={faults} tokens_checked={tokens} \
         violations={violations}"
    );
}

/// The WAL writer would flush (and so ship) WAL within 200 ms; a 10 s delay keeps unflushed
/// sequence WAL around for the whole storm.
pub const SLOW_WAL_WRITER: &str = "wal_writer_delay=10000";

/// Makes every standby of `primary` synchronous and waits until one is in sync.
fn make_synchronous(primary: &Server) {
    let mut client = primary.connect("postgres");
    // One statement per call: ALTER SYSTEM refuses to run in a (multi-statement) block.
    for statement in [
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
        "ALTER SYSTEM SET synchronous_commit = 'on'",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(statement).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let in_sync: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                &[],
            )
            .unwrap()
            .get(0);
        if in_sync == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "standby did not become synchronous"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// What a failover run does: synchronous standby or not; every storm rolling back (else every
/// other one); the clients' libpq options; whether the standby is cut off (stopped) while the
/// primary keeps handing out tokens, before the primary dies.
pub struct FailoverPlan<'a> {
    pub synchronous: bool,
    pub rollback_only: bool,
    pub client_options: &'a str,
    pub cut_off_standby: bool,
}

/// How a failover run went.
pub struct FailoverRun {
    pub operations: u64,
    pub tokens: usize,
    pub violations: usize,
}

/// `failovers` times: a standby is made from the primary (synchronous or not), a storm runs
/// on the primary, the primary is killed, the standby promoted; then one more storm on the
/// last primary. Every other storm rolls all its grants back (the longest-unflushed case);
/// `rollback_only` makes them all do so. Servers are named `{name}-N`.
pub fn failovers_during_storms(
    name: &str,
    failovers: usize,
    settings: &[&str],
    plan: FailoverPlan,
) -> FailoverRun {
    let mut primary = Server::fresh(&format!("{name}-0"), settings);
    primary.create_database();
    let mut epochs = Vec::new();
    let mut operations = 0;
    for failover in 0..=failovers {
        let standby = (failover < failovers).then(|| {
            let standby_name = format!("{name}-{}", failover + 1);
            let standby = Server::standby_of(&primary, &standby_name, settings);
            if plan.synchronous {
                make_synchronous(&primary);
            }
            standby
        });
        let fates = match plan.rollback_only || failover % 2 == 1 {
            true => Fates::RollbackOnly,
            false => Fates::Mixed,
        };
        let storm =
            Storm::start_with_options(&primary, 4, failover as u64, fates, plan.client_options);
        thread::sleep(Duration::from_millis(500));
        if let (Some(standby), true) = (&standby, plan.cut_off_standby) {
            // The standby stops receiving; the primary goes on handing out tokens.
            pg_sh(&["stop", &standby.dir]);
            thread::sleep(Duration::from_millis(300));
        }
        let Some(standby) = standby else {
            let result = storm.finish();
            operations += result.operations;
            epochs.push(result.tokens);
            break;
        };
        primary.crash();
        let result = storm.finish();
        assert!(!result.tokens.is_empty(), "failover {failover}: no tokens");
        operations += result.operations;
        epochs.push(result.tokens);
        if plan.cut_off_standby {
            standby.start();
        }
        standby.promote();
        standby.wait_writable();
        // The old primary is gone for good; its directory is reused two failovers later.
        drop(std::mem::replace(&mut primary, standby));
    }
    // The promoted server still serves the data: the extension is there.
    primary.connect(DATABASE).batch_execute("SELECT 1").unwrap();
    FailoverRun {
        operations,
        tokens: epochs.iter().map(Vec::len).sum(),
        violations: violations_across_epochs(&epochs),
    }
}

/// Sends signal `name` ("STOP", "CONT", "KILL") to process `pid` with kill(1).
pub fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -{name} {pid}");
}

/// Polls `done` with `client` every 20 ms until it holds; fails after `within`.
pub fn until(
    client: &mut Client,
    what: &str,
    within: Duration,
    mut done: impl FnMut(&mut Client) -> bool,
) {
    let deadline = Instant::now() + within;
    while !done(client) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The next grant a waiter reports, which must come within `within`.
pub fn next_grant<T>(granted: &std::sync::mpsc::Receiver<T>, within: Duration) -> T {
    granted.recv_timeout(within).expect("a waiter is granted")
}

/// No grant for a second and a half: longer than the head of a line takes to look again
/// without a wake-up.
pub fn no_grant<T: std::fmt::Debug>(granted: &std::sync::mpsc::Receiver<T>) {
    match granted.recv_timeout(Duration::from_millis(1500)) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        other => panic!("expected no grant, got {other:?}"),
    }
}
