//! Fenced locks and self-renewing leases on PostgreSQL's
//! [fenced_lock](https://github.com/fenced-lock/fenced_lock) extension, for tokio-postgres.
//!
//! Every lock comes with a **fencing token**; the resource refuses writes with a superseded
//! one, so a holder that was paused past its lease cannot overwrite its successor's work.
//!
//! # A transaction lock
//!
//! Taken inside the caller's transaction, ended with it:
//!
//! ```no_run
//! # async fn example(client: &mut tokio_postgres::Client) -> Result<(), fenced_lock::Error> {
//! use fenced_lock::{acquire, fenced_update, AcquireOptions};
//! use std::time::Duration;
//!
//! let tx = client.transaction().await?;
//! let options = AcquireOptions { timeout: Some(Duration::from_secs(5)), ..Default::default() };
//! let token = acquire(&tx, 1001, 42, options).await?;
//! fenced_update(&tx, "accounts", 42, token, &serde_json::json!({"balance": 10})).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # A lease
//!
//! Renewed by a task every third of its ttl; its lost signal (a `CancellationToken`) fires when
//! it cannot be:
//!
//! ```no_run
//! # async fn example(config: tokio_postgres::Config) -> Result<(), fenced_lock::Error> {
//! use fenced_lock::{acquire_lease, LeaseOptions};
//! use std::time::Duration;
//!
//! let lease = acquire_lease(&config, tokio_postgres::NoTls, 1001, 42,
//!     LeaseOptions::new(Duration::from_secs(30))).await?;
//! for step in 0..10 {
//!     lease.check()?;                      // ErrorKind::LeaseLost once not known valid
//!     do_step(step, lease.token(), lease.lost_signal()).await;
//! }
//! lease.release().await?;
//! # Ok(()) }
//! # async fn do_step(_: i32, _: i64, _: tokio_util::sync::CancellationToken) {}
//! ```
//!
//! The lease is known valid until the moment the last successful renewal was **sent** plus the
//! ttl, on the monotonic clock (never the wall clock), less a margin. The signal fires, and the
//! `on_lost` callback is called, when a renewal returns no lease (released or taken over),
//! fails, or has not completed by then (each renewal runs with that deadline, so one hung on a
//! dead link ends there). A lost lease stays lost: it is never taken again with a new token
//! behind the holder's back; a broken connection is a lost lease.
//!
//! # A leader loop
//!
//! ```no_run
//! # async fn example(config: tokio_postgres::Config) -> Result<(), fenced_lock::Error> {
//! use fenced_lock::LeaderElection;
//! use tokio_util::sync::CancellationToken;
//!
//! let stop = CancellationToken::new();
//! LeaderElection::new(config, 1001, 1)
//!     .run(
//!         tokio_postgres::NoTls,
//!         stop,
//!         |term, term_ended| async move {
//!             // lead with `term` as the fencing token until `term_ended` is cancelled
//!             term_ended.cancelled().await;
//!         },
//!         || eprintln!("no longer the leader"),
//!     )
//!     .await
//! # }
//! ```
//!
//! # Behind PgBouncer
//!
//! Every statement goes with `query_typed` (the unnamed statement, parsed and run in one round
//! trip), so nothing is prepared on the server under a name; a lease belongs to its owner, not
//! to a server connection, and each renewal is a transaction of its own.
#![warn(missing_docs)]

mod errors;
mod leader;
mod lease;
mod statements;
mod transaction;

pub use errors::{Error, ErrorKind, Stale};
pub use leader::LeaderElection;
pub use lease::{
    acquire_lease, try_acquire_lease, Lease, LeaseOptions, OnLost, LOST_DEADLINE, LOST_NOT_HELD,
    LOST_RELEASED,
};
pub use statements::new_owner;
pub use transaction::{
    acquire, fence_check, fenced_update, fenced_update_columns, try_acquire, AcquireOptions,
};
