//! The driver suite's patterns, run by rust-postgres (the `postgres` crate over
//! tokio-postgres), which prepares each statement with untyped parameters and lets the server
//! infer their types, directly and through PgBouncer in transaction mode.
//!
//!     fenced_lock_driver_suite ROUTE              (ROUTE: direct | pooled)
//!     fenced_lock_driver_suite mixed SETTINGS N   (the mixed workload through PgBouncer,
//!                                                  run.sh says what it checks; SETTINGS:
//!                                                  documented | reused, the control:
//!                                                  statements prepared once, outside a
//!                                                  transaction, and used in later ones)
//!
//! Prints one line per pattern, "rust-postgres <route> <pattern>: ok" or "... FAILED: why",
//! and exits 1 if any failed.

use postgres::{Client, NoTls};
use std::env;

type Outcome = Result<(), String>;

struct Suite {
    route: String,
    base: i32,
    a: Client,
    b: Client,
}

fn connect(route: &str) -> Client {
    let variable = |direct: &str, pooled: &str| {
        env::var(if route == "pooled" { pooled } else { direct }).expect("set by run.sh")
    };
    let url = format!(
        "host={} port={} dbname={} user=postgres",
        variable("DRIVERS_HOST", "DRIVERS_POOLED_HOST"),
        variable("DRIVERS_PORT", "DRIVERS_POOLED_PORT"),
        env::var("DRIVERS_DATABASE").expect("set by run.sh"),
    );
    Client::connect(&url, NoTls).expect("connect")
}

fn sqlstate(error: &postgres::Error) -> Option<String> {
    error.code().map(|code| code.code().to_string())
}

fn check(condition: bool, message: String) -> Outcome {
    condition.then_some(()).ok_or(message)
}

impl Suite {
    // Each pattern runs its parameterised statements inside a transaction: behind a
    // transaction-mode pooler, rust-postgres' prepared statements must stay on one server
    // connection.
    fn guarded_write(&mut self) -> Outcome {
        let id = self.base + 1;
        let changes = serde_json::json!({ "v": format!("rust-postgres {}", self.route) });
        let mut tx = self.a.transaction().map_err(|e| e.to_string())?;
        let token: i64 = tx
            .query_one("SELECT acquire_fenced($1, $2)", &[&4201, &id])
            .map_err(|e| e.to_string())?
            .get(0);
        // Untyped, fenced_update's parameters are (text, text, bigint, jsonb): the table by
        // name and the id as text, read as the key column's type.
        let update = "SELECT fenced_update_or_false($1, $2, $3, $4)";
        let id_text = id.to_string();
        let written: bool = tx
            .query_one(update, &[&"driver_rows", &id_text, &token, &changes])
            .map_err(|e| e.to_string())?
            .get(0);
        let stale: bool = tx
            .query_one(update, &[&"driver_rows", &id_text, &(token - 1), &changes])
            .map_err(|e| e.to_string())?
            .get(0);
        tx.commit().map_err(|e| e.to_string())?;
        check(token > 0, format!("token {token}"))?;
        check(written, "fenced_update returned false".into())?;
        check(!stale, "a lower token wrote".into())?;
        let mut tx = self.a.transaction().map_err(|e| e.to_string())?;
        let strict = "SELECT fenced_update($1, $2, $3, $4)";
        let error = tx
            .query_one(strict, &[&"driver_rows", &id_text, &(token - 1), &changes])
            .err()
            .ok_or("fenced_update_strict with a lower token wrote")?;
        check(
            sqlstate(&error).as_deref() == Some("SF001"),
            format!("fenced_update_strict with a lower token: {error}"),
        )
    }

    /// Two keys in one call, listed in either order: one token; an overlapping try gets NULL.
    fn many_keys(&mut self) -> Outcome {
        let keys = vec![self.base + 11, self.base + 10];
        let overlapping = vec![self.base + 12, self.base + 11];
        let names = vec![format!("from:{}", self.base), format!("to:{}", self.base)];
        let mut holder = self.a.transaction().map_err(|e| e.to_string())?;
        let token: i64 = holder
            .query_one("SELECT acquire_fenced_all($1, $2)", &[&4201, &keys])
            .map_err(|e| e.to_string())?
            .get(0);
        let mut other = self.b.transaction().map_err(|e| e.to_string())?;
        let busy: Option<i64> = other
            .query_one(
                "SELECT try_acquire_fenced_all($1, $2)",
                &[&4201, &overlapping],
            )
            .map_err(|e| e.to_string())?
            .get(0);
        other.rollback().map_err(|e| e.to_string())?;
        let named: i64 = holder
            .query_one(
                "SELECT acquire_fenced_all_named($1, $2)",
                &[&"drivers", &names],
            )
            .map_err(|e| e.to_string())?
            .get(0);
        holder.commit().map_err(|e| e.to_string())?;
        check(token > 0, format!("token {token}"))?;
        check(
            busy.is_none(),
            format!("an overlapping set was taken: {busy:?}"),
        )?;
        check(named > token, format!("named keys gave {named}"))
    }

    fn skip_if_busy(&mut self) -> Outcome {
        let key = self.base + 2;
        let mut holder = self.a.transaction().map_err(|e| e.to_string())?;
        holder
            .query_one("SELECT acquire_fenced($1, $2)", &[&4201, &key])
            .map_err(|e| e.to_string())?;
        let mut other = self.b.transaction().map_err(|e| e.to_string())?;
        let busy: Option<i64> = other
            .query_one("SELECT try_acquire_fenced($1, $2)", &[&4201, &key])
            .map_err(|e| e.to_string())?
            .get(0);
        check(
            busy.is_none(),
            format!("try_acquire_fenced returned {busy:?}"),
        )
    }

    fn bounded_wait(&mut self) -> Outcome {
        let key = self.base + 2;
        let mut holder = self.a.transaction().map_err(|e| e.to_string())?;
        holder
            .query_one("SELECT acquire_fenced($1, $2)", &[&4201, &key])
            .map_err(|e| e.to_string())?;
        let mut other = self.b.transaction().map_err(|e| e.to_string())?;
        // rust-postgres has no interval type: give the timeout in seconds.
        let error = other
            .query_one(
                "SELECT acquire_fenced($1, $2, make_interval(secs => $3))",
                &[&4201, &key, &0.1_f64],
            )
            .err()
            .ok_or("acquired a held key")?;
        check(
            sqlstate(&error).as_deref() == Some("55P03"),
            format!("{error}"),
        )
    }

    fn stale_write(&mut self) -> Outcome {
        let mut tx = self.a.transaction().map_err(|e| e.to_string())?;
        let older: i64 = tx
            .query_one("SELECT acquire_fenced($1, $2)", &[&4201, &(self.base + 3)])
            .map_err(|e| e.to_string())?
            .get(0);
        let newer: i64 = tx
            .query_one("SELECT acquire_fenced($1, $2)", &[&4201, &(self.base + 4)])
            .map_err(|e| e.to_string())?
            .get(0);
        tx.commit().map_err(|e| e.to_string())?;
        let resource = format!("drivers/rust-postgres/{}", self.route);
        let mut tx = self.a.transaction().map_err(|e| e.to_string())?;
        tx.execute("SELECT fence_check($1, $2)", &[&resource, &newer])
            .map_err(|e| e.to_string())?;
        let error = tx
            .execute("SELECT fence_check($1, $2)", &[&resource, &older])
            .err()
            .ok_or("a stale token was accepted")?;
        check(
            sqlstate(&error).as_deref() == Some("SF001"),
            format!("{error}"),
        )
    }

    fn named_and_bigint(&mut self) -> Outcome {
        let big = 5_000_000_000_i64 + self.base as i64;
        let mut tx = self.a.transaction().map_err(|e| e.to_string())?;
        let mut token = |sql: &str, key: &(dyn postgres::types::ToSql + Sync)| {
            tx.query_one(sql, &[&"drivers", key])
                .map(|row| row.get::<_, i64>(0))
                .map_err(|e| e.to_string())
        };
        let named = token(
            "SELECT acquire_fenced_named($1, $2)",
            &format!("order:{}", self.base),
        )?;
        let by_bigint = token("SELECT acquire_fenced_named($1, $2::bigint::text)", &big)?;
        let by_text = token("SELECT acquire_fenced_named($1, $2)", &big.to_string())?;
        check(
            by_bigint == by_text,
            "a bigint key and its text differ".into(),
        )?;
        check(named != by_bigint, "two keys shared a grant".into())
    }

    fn autocommit(&mut self) -> Outcome {
        let key = self.base + 5;
        // Outside a transaction: through the pooler a parameterised statement could be
        // prepared on one server connection and run on another, so the key is a literal there.
        let error = match self.route.as_str() {
            "pooled" => self
                .a
                .simple_query(&format!("SELECT acquire_fenced(4201, {key})"))
                .err(),
            _ => self
                .a
                .query_one("SELECT acquire_fenced($1, $2)", &[&4201, &key])
                .err(),
        }
        .ok_or("acquired outside a transaction block")?;
        check(
            sqlstate(&error).as_deref() == Some("25P01"),
            format!("{error}"),
        )
    }

    /// One statement in a transaction of its own on `client` (through the pooler, a prepared
    /// statement must run on the server connection it was prepared on); its value.
    fn one<T: for<'a> postgres::types::FromSql<'a>>(
        client: &mut Client,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<T, String> {
        let mut tx = client.transaction().map_err(|e| e.to_string())?;
        let value = tx.query_one(sql, params).map_err(|e| e.to_string())?.get(0);
        tx.commit().map_err(|e| e.to_string())?;
        Ok(value)
    }

    fn lease(&mut self) -> Outcome {
        // rust-postgres has no interval type: the TTL in seconds.
        let (key, ttl) = (self.base + 7, 30.0f64);
        let acquire = "SELECT try_acquire_lease($1, $2, $3, make_interval(secs => $4))";
        let token: Option<i64> = Self::one(&mut self.a, acquire, &[&4203, &key, &"a", &ttl])?;
        let token = token.ok_or("no token for a free key")?;
        let busy: Option<i64> = Self::one(&mut self.b, acquire, &[&4203, &key, &"b", &ttl])?;
        let renew = "SELECT renew_lease($1, $2, $3, make_interval(secs => $4)) IS NOT NULL";
        let renewed: bool = Self::one(&mut self.a, renew, &[&4203, &key, &token, &ttl])?;
        let release = "SELECT release_lease($1, $2, $3)";
        let released: bool = Self::one(&mut self.a, release, &[&4203, &key, &token])?;
        let taken: Option<i64> = Self::one(&mut self.b, acquire, &[&4203, &key, &"b", &ttl])?;
        let _: bool = Self::one(&mut self.b, release, &[&4203, &key, &taken])?;
        check(busy.is_none(), format!("another owner got {busy:?}"))?;
        check(
            renewed && released && taken > Some(token),
            format!("renewed {renewed}, released {released}, next token {taken:?}"),
        )
    }

    fn leader_owner(&mut self) -> Outcome {
        // The second owner never gets the first's term, whichever server connection it is on.
        let key = self.base + 9;
        let lead = "SELECT try_acquire_fenced_session($1, $2, $3)";
        let term: Option<i64> = Self::one(&mut self.a, lead, &[&4203, &key, &"client-a"])?;
        let other: Option<i64> = Self::one(&mut self.b, lead, &[&4203, &key, &"client-b"])?;
        check(term.is_some(), "no term for a free key".into())?;
        check(
            other.is_none(),
            format!("a second owner led with term {other:?}"),
        )?;
        if self.route == "direct" {
            let release = "SELECT release_fenced($1, $2, $3)";
            let released: bool = Self::one(&mut self.a, release, &[&4203, &key, &"client-a"])?;
            check(released, "not released".into())?;
        }
        Ok(())
    }

    fn permits(&mut self) -> Outcome {
        // One permit: a slot and a token as a row; the other client's try gets no row (count
        // 0), never a NULL row; after the holder's commit, a larger token.
        let key = self.base + 13;
        let mut holder = self.a.transaction().map_err(|e| e.to_string())?;
        let row = holder
            .query_one(
                "SELECT slot, token FROM acquire_permit($1, $2, $3)",
                &[&4206, &key, &1],
            )
            .map_err(|e| e.to_string())?;
        let (slot, token): (i32, i64) = (row.get(0), row.get(1));
        let none: i64 = Self::one(
            &mut self.b,
            "SELECT count(*) FROM try_acquire_permit($1, $2, $3)",
            &[&4206, &key, &1],
        )?;
        holder.commit().map_err(|e| e.to_string())?;
        let later: i64 = Self::one(
            &mut self.b,
            "SELECT token FROM try_acquire_permit($1, $2, $3)",
            &[&4206, &key, &1],
        )?;
        check(
            slot == 1 && token > 0,
            format!("slot {slot}, token {token}"),
        )?;
        check(
            none == 0,
            format!("a second holder of one permit: {none} rows"),
        )?;
        check(later > token, format!("next token {later}"))
    }

    fn lease_permit(&mut self) -> Outcome {
        // A permit as a lease: every call commits on its own, so it works through the pooler.
        let (key, ttl) = (self.base + 14, 30.0f64);
        let acquire =
            "SELECT token FROM try_acquire_lease_permit($1, $2, $3, $4, make_interval(secs => $5))";
        let count =
            "SELECT count(*) FROM try_acquire_lease_permit($1, $2, $3, $4, make_interval(secs => $5))";
        let token: i64 = Self::one(&mut self.a, acquire, &[&4206, &key, &1, &"a", &ttl])?;
        let none: i64 = Self::one(&mut self.b, count, &[&4206, &key, &1, &"b", &ttl])?;
        let renew = "SELECT renew_lease($1, $2, $3, make_interval(secs => $4)) IS NOT NULL";
        let renewed: bool = Self::one(&mut self.a, renew, &[&4206, &key, &token, &ttl])?;
        let release = "SELECT release_lease($1, $2, $3)";
        let released: bool = Self::one(&mut self.a, release, &[&4206, &key, &token])?;
        let wait = "SELECT token FROM acquire_lease_permit($1, $2, $3, $4, \
                    make_interval(secs => $5), make_interval(secs => $6))";
        let taken: i64 = Self::one(&mut self.b, wait, &[&4206, &key, &1, &"b", &ttl, &5.0f64])?;
        let _: bool = Self::one(&mut self.b, release, &[&4206, &key, &taken])?;
        check(
            none == 0,
            format!("another owner got a permit: {none} rows"),
        )?;
        check(
            token > 0 && renewed && released && taken > token,
            format!("token {token}, renewed {renewed}, released {released}, next token {taken}"),
        )
    }

    fn shared_lock(&mut self) -> Outcome {
        // Two readers at once, each with its own token; a writer's try is busy (NULL).
        let key = self.base + 15;
        let mut reader = self.a.transaction().map_err(|e| e.to_string())?;
        let first: i64 = reader
            .query_one(
                "SELECT acquire_fenced($1, $2, shared => true)",
                &[&4206, &key],
            )
            .map_err(|e| e.to_string())?
            .get(0);
        let second: Option<i64> = Self::one(
            &mut self.b,
            "SELECT try_acquire_fenced($1, $2, shared => true)",
            &[&4206, &key],
        )?;
        let busy: Option<i64> = Self::one(
            &mut self.b,
            "SELECT try_acquire_fenced($1, $2)",
            &[&4206, &key],
        )?;
        reader.commit().map_err(|e| e.to_string())?;
        check(
            second.is_some_and(|second| second > first),
            format!("readers' tokens {first}, {second:?}"),
        )?;
        check(
            busy.is_none(),
            format!("a writer got {busy:?} beside a reader"),
        )
    }

    fn session_lease(&mut self) -> Outcome {
        let key = self.base + 6;
        let token: i64 = self
            .a
            .query_one("SELECT acquire_fenced_session($1, $2)", &[&4201, &key])
            .map_err(|e| e.to_string())?
            .get(0);
        let held: Option<i64> = self
            .a
            .query_one("SELECT current_fence($1, $2)", &[&4201, &key])
            .map_err(|e| e.to_string())?
            .get(0);
        let released: bool = self
            .a
            .query_one("SELECT release_fenced($1, $2)", &[&4201, &key])
            .map_err(|e| e.to_string())?
            .get(0);
        check(
            held == Some(token) && released,
            format!("{held:?} {released}"),
        )
    }
}

const HELD: &str =
    "SELECT token FROM fenced_locks WHERE ns = $1 AND id = $2 AND pid = pg_backend_pid()";
const MIXED_STATEMENTS: [&str; 7] = [
    "SELECT acquire_fenced($1, $2)",
    "SELECT try_acquire_fenced($1, $2)",
    HELD,
    "SELECT current_fence($1, $2)",
    "SELECT try_acquire_fenced_session($1, $2, $3)",
    "SELECT release_fenced($1, $2, $3)",
    "SELECT fenced_update_or_false($1, $2, $3, $4)",
];

/// A connection of the mixed workload, with its statements prepared up front when `reused`.
struct MixedClient {
    client: Client,
    prepared: Vec<postgres::Statement>,
}

impl MixedClient {
    fn new(reused: bool) -> Result<Self, postgres::Error> {
        let mut client = connect("pooled");
        let prepared = if reused {
            let statements = MIXED_STATEMENTS.iter().map(|sql| client.prepare(sql));
            statements.collect::<Result<_, _>>()?
        } else {
            Vec::new()
        };
        Ok(MixedClient { client, prepared })
    }

    /// One transaction of the mixed workload: what was wrong with its answers, if anything.
    fn transaction(
        &mut self,
        kind: &str,
        key: i32,
        row: i32,
    ) -> Result<Option<String>, postgres::Error> {
        let prepared = &self.prepared;
        let mut tx = self.client.transaction()?;
        let mut one = |index: usize, params: &[&(dyn postgres::types::ToSql + Sync)]| match prepared
            .get(index)
        {
            Some(statement) => tx.query_one(statement, params),
            None => tx.query_one(MIXED_STATEMENTS[index], params),
        };
        let problem = match kind {
            "acquire" | "try" => {
                let index = if kind == "acquire" { 0 } else { 1 };
                let token: Option<i64> = one(index, &[&4205, &key])?.get(0);
                let held: Option<i64> = one(2, &[&4205, &key])?.get(0);
                (token.is_none() || held != token)
                    .then(|| format!("{kind} gave {token:?}, fenced_locks shows {held:?}"))
            }
            "current" => {
                let fence: Option<i64> = one(3, &[&4205, &key])?.get(0);
                fence.map(|fence| format!("current_fence of a free key gave {fence}"))
            }
            "leader" => {
                let owner = format!("owner-{key}");
                let term: Option<i64> = one(4, &[&4205, &key, &owner])?.get(0);
                let released: bool = one(5, &[&4205, &key, &owner])?.get(0);
                (term.is_none() || !released).then(|| {
                    format!("try_acquire_fenced_session gave {term:?}, release_fenced {released}")
                })
            }
            _ => {
                let token: i64 = one(0, &[&4205, &key])?.get(0);
                let changes = serde_json::json!({ "v": key.to_string() });
                let written: bool =
                    one(6, &[&"driver_rows", &row.to_string(), &token, &changes])?.get(0);
                (!written).then(|| format!("fenced_update with token {token} gave false"))
            }
        };
        tx.commit()?;
        Ok(problem)
    }
}

fn run_mixed(settings: &str, process: i32) -> bool {
    let slot: i32 = env::var("MIXED_SLOT")
        .expect("set by run.sh")
        .parse()
        .expect("a number");
    let reused = settings == "reused";
    let mut clients = Vec::new();
    let mut setup_errors = 0;
    for _ in 0..6 {
        match MixedClient::new(reused) {
            Ok(client) => clients.push(client),
            Err(_) => setup_errors += 1,
        }
    }
    // A small seeded generator, so each process picks the same sequence on every run.
    let mut state = process as u64 + 1;
    let mut pick = |n: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize % n
    };
    let kinds = ["acquire", "try", "current", "leader", "update"];
    let (mut wrong, mut errors, mut first) = (0, setup_errors, None);
    for i in 0..150 {
        if clients.is_empty() {
            break;
        }
        let index = pick(clients.len());
        let kind = kinds[pick(kinds.len())];
        let key = slot * 10000 + process * 1000 + i;
        let problem =
            match clients[index].transaction(kind, key, slot * 20 + process * 10 + i % 10 + 3001) {
                Ok(problem) => {
                    wrong += problem.is_some() as i32;
                    problem
                }
                Err(error) => {
                    errors += 1;
                    Some(format!("SQLSTATE {:?}: {error}", sqlstate(&error)))
                }
            };
        if first.is_none() {
            first = problem.map(|problem| format!("{kind}: {problem}"));
        }
    }
    let first = first
        .map(|first| format!("; first: {first}"))
        .unwrap_or_default();
    println!("rust-postgres mixed {settings} p{process}: 150 transactions, {wrong} wrong, {errors} errors{first}");
    wrong == 0 && errors == 0
}

fn run_patterns(route: String) -> bool {
    let mut suite = Suite {
        base: if route == "pooled" { 700 } else { 600 },
        a: connect(&route),
        b: connect(&route),
        route,
    };
    type Pattern = fn(&mut Suite) -> Outcome;
    let mut patterns: Vec<(&str, Pattern)> = vec![
        ("guarded_write", Suite::guarded_write),
        ("skip_if_busy", Suite::skip_if_busy),
        ("bounded_wait", Suite::bounded_wait),
        ("stale_write", Suite::stale_write),
        ("named_and_bigint", Suite::named_and_bigint),
        ("many_keys", Suite::many_keys),
        ("autocommit", Suite::autocommit),
        ("lease", Suite::lease),
        ("leader_owner", Suite::leader_owner),
        ("permits", Suite::permits),
        ("lease_permit", Suite::lease_permit),
        ("shared_lock", Suite::shared_lock),
    ];
    // Session-scoped locks belong to one server connection: not through a transaction pooler.
    if suite.route == "direct" {
        patterns.push(("session_lease", Suite::session_lease));
    }
    let mut failed = 0;
    for (name, pattern) in patterns {
        match pattern(&mut suite) {
            Ok(()) => println!("rust-postgres {} {name}: ok", suite.route),
            Err(why) => {
                failed += 1;
                println!("rust-postgres {} {name}: FAILED: {why}", suite.route);
            }
        }
    }
    failed == 0
}

fn main() {
    let args: Vec<String> = env::args().collect();
    let ok = match args.get(1).map(String::as_str) {
        Some("mixed") => run_mixed(&args[2], args[3].parse().expect("a process number")),
        Some(route) => run_patterns(route.to_string()),
        None => panic!("usage: fenced_lock_driver_suite direct|pooled|mixed SETTINGS N"),
    };
    std::process::exit(if ok { 0 } else { 1 });
}
