//! The driver suite's patterns, run by rust-postgres (the `postgres` crate over
//! tokio-postgres), which prepares each statement with untyped parameters and lets the server
//! infer their types, directly and through PgBouncer in transaction mode.
//!
//!     fenced_lock_driver_suite ROUTE   (ROUTE: direct | pooled)
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
        let update = "SELECT fenced_update($1, $2, $3, $4)";
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
        check(!stale, "a lower token wrote".into())
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
        tx.execute("SELECT fence_check_strict($1, $2)", &[&resource, &newer])
            .map_err(|e| e.to_string())?;
        let error = tx
            .execute("SELECT fence_check_strict($1, $2)", &[&resource, &older])
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
        let by_bigint = token("SELECT acquire_fenced_named_bigint($1, $2)", &big)?;
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
        let acquire = "SELECT acquire_lease($1, $2, $3, make_interval(secs => $4))";
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
        let lead = "SELECT become_leader($1, $2, $3)";
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

fn main() {
    let route = env::args()
        .nth(1)
        .expect("usage: fenced_lock_driver_suite direct|pooled");
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
        ("autocommit", Suite::autocommit),
        ("lease", Suite::lease),
        ("leader_owner", Suite::leader_owner),
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
    std::process::exit(if failed > 0 { 1 } else { 0 });
}
