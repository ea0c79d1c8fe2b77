//! Every failure fenced_lock reports, and for each, in one place (`FencedError::report`), its
//! SQLSTATE, message, DETAIL and HINT. The README's error table mirrors this file.

use crate::types::{LockKey, Lockable, Mode, NullArgument, Scope};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::{CaughtError, ErrorReport, ErrorReportWithLevel};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

pub enum FencedError {
    /// An argument was NULL; a NULL result would be mistaken for "busy" or "refused".
    NullArgument {
        function: &'static str,
        argument: &'static str,
    },
    NegativeTimeout,
    TimeoutTooLong,
    /// On a hot standby advisory locks exclude only that standby's sessions.
    HotStandby,
    /// The key stayed held past the caller's timeout (zero: held at the first try).
    LockNotAcquired {
        key: LockKey,
        timeout_ms: i32,
        holders: Vec<i32>,
    },
    /// A counter view read where fenced_lock is not preloaded: no shared memory to count in.
    NotPreloaded {
        view: &'static str,
    },
    /// An object of the extension (token sequence, registry) is gone.
    ExtensionObjectMissing {
        name: String,
    },
    /// The key is already held by this backend at the other scope.
    ScopeConflict {
        key: LockKey,
        held: Scope,
    },
    /// The key is already held by this backend at the same scope in the other mode (shared
    /// or exclusive).
    ModeConflict {
        key: LockKey,
        held: Mode,
    },
    /// A function called through the SQL definition of a release before 1.0.0, whose C symbol
    /// 1.0 keeps only so that the definition can exist (src/released.rs).
    DefinitionOutdated {
        function: String,
    },
    /// A waiting lease acquire whose timeout (or lock_timeout) ran out; the holder last seen.
    LeaseNotAcquired {
        key: LockKey,
        timeout_ms: i32,
        lock_timeout: bool,
        /// The owner of the lease last seen held.
        holder: Option<String>,
        /// A lease semaphore's permits (None: the key's lease).
        permits: Option<u16>,
    },
    /// No permit of the key came free before the wait's bound (its timeout, or lock_timeout).
    PermitNotAcquired {
        key: LockKey,
        permits: i32,
        timeout_ms: i32,
        /// Whether the bound was lock_timeout (else the call's own timeout).
        lock_timeout: bool,
    },
    /// A permit wait in a cycle the lock manager cannot see (the head of a permit line sleeps
    /// outside it): a holder of the permits waits, directly or through others, for a lock this
    /// session holds.
    PermitDeadlock {
        key: LockKey,
        holders: Vec<i32>,
    },
    /// A wait for a permit of a semaphore whose every permit this session holds (for other
    /// owners, or at the other scope): nothing but this session could free one.
    PermitSelfWait {
        key: LockKey,
        permits: i32,
    },
    /// A waiting session-scoped acquire found the key held by this very session for another
    /// owner (or for none): behind a pooler, another client's grant.
    HeldForAnotherOwner {
        key: LockKey,
        owner: Option<String>,
    },
    /// The wait for synchronous standbys to confirm the token's WAL ended without it.
    TokenNotReplicated,
    /// The token sequence is too near the end of bigint for another block of tokens (moved
    /// there by hand, or by a token floor that high).
    TokensExhausted {
        position: i64,
    },
    /// An argument of the resource side has the wrong shape.
    InvalidArgument {
        message: String,
        hint: Option<&'static str>,
    },
    UndefinedColumn {
        table: String,
        column: String,
    },
    /// Tokens are bigint: a smaller fence column overflows (each failover skips 10^9).
    FenceColumnNotBigint {
        table: String,
        column: String,
        /// The column as an identifier in SQL (`quote_identifier`), for the HINT's statement.
        quoted_column: String,
        type_name: String,
    },
    NotATable {
        table: String,
    },
    NoSuchRow {
        table: String,
        key_column: String,
        key: String,
    },
    /// fenced_update's target OID names no relation (dropped since it was looked up).
    UndefinedTable {
        oid: u32,
    },
    /// fenced_update: row-level security shows the row to the caller but does not let it
    /// update the row, which must not read as "superseded".
    RowNotUpdatable {
        table: String,
        key: String,
    },
    /// fenced_update: no UPDATE policy blocked the row, but a BEFORE UPDATE trigger returned
    /// NULL for it, which must not read as "superseded" either.
    RowSkippedByTrigger {
        table: String,
        key: String,
    },
    /// A function that locks, unlocks or draws a token was called during a parallel operation
    /// (through a wrapper labelled PARALLEL SAFE): a worker's locks are not its leader's.
    ParallelMode {
        function: String,
    },
    /// A text argument longer than the limit for what it names (an owner, a lease's key).
    ValueTooLong {
        function: &'static str,
        argument: &'static str,
        limit: usize,
    },
    /// A set of keys (an array argument) with no key in it.
    EmptyKeySet {
        function: &'static str,
        argument: &'static str,
    },
    /// A set of keys with a NULL among them.
    NullKey {
        function: &'static str,
        argument: &'static str,
    },
    /// More keys in one call than a call may take.
    TooManyKeys {
        function: &'static str,
        argument: &'static str,
        limit: usize,
    },
    /// The token sequence was made UNLOGGED: after a crash it would restart and repeat tokens.
    UnloggedTokenSequence,
    /// The lease table was given a trigger, or an index other than a plain one, which the
    /// lease functions' direct writes would not maintain.
    LeaseTableAltered {
        what: String,
    },
    /// A lease's row changed after the snapshot of a REPEATABLE READ or SERIALIZABLE
    /// transaction: as PostgreSQL's own FOR UPDATE would say, not "busy".
    LeaseChangedAfterSnapshot {
        function: &'static str,
        key: LockKey,
    },
    /// A lease function called in a read-only transaction (on a hot standby too): every one
    /// of them may write the lease's row.
    ReadOnlyLease {
        function: &'static str,
    },
    /// Another open transaction is writing a lease's row that renew_lease or release_lease
    /// would write: they never wait for it.
    LeaseRowBusy {
        function: &'static str,
        key: LockKey,
    },
    /// A query fenced_lock runs itself (through SPI) failed in a way PostgreSQL did not report
    /// as an error of its own: a bug in fenced_lock.
    Internal {
        what: &'static str,
        error: String,
    },
    /// A namespace name that is not registered.
    UnknownNamespace {
        name: String,
    },
    /// register_namespace: the name or the id belongs to another entry.
    NamespaceTaken {
        message: String,
    },
    /// force_release asked to terminate the caller's own backend.
    ForceReleaseOwnLock {
        key: LockKey,
    },
    /// enforce_fence attached or called the wrong way.
    TriggerMisuse {
        message: String,
    },
}

impl From<NullArgument> for FencedError {
    fn from(NullArgument { function, argument }: NullArgument) -> FencedError {
        FencedError::NullArgument { function, argument }
    }
}

/// Raises the error of a failed check (`types::required`, say) as a PostgreSQL ERROR.
pub trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl From<(&'static str, pgrx::spi::Error)> for FencedError {
    fn from((what, error): (&'static str, pgrx::spi::Error)) -> FencedError {
        FencedError::Internal {
            what,
            error: error.to_string(),
        }
    }
}

impl<T, E: Into<FencedError>> OrRaise<T> for Result<T, E> {
    fn or_raise(self) -> T {
        self.unwrap_or_else(|error| error.into().raise())
    }
}

/// An error as PostgreSQL reports it: its SQLSTATE, message, DETAIL and HINT, written together
/// for each error in `FencedError::report`.
struct Report {
    code: PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
}

impl Report {
    fn new(code: PgSqlErrorCode, message: impl Into<String>) -> Report {
        Report {
            code,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    fn detail(self, detail: impl Into<String>) -> Report {
        Report {
            detail: Some(detail.into()),
            ..self
        }
    }

    fn hint(self, hint: impl Into<String>) -> Report {
        Report {
            hint: Some(hint.into()),
            ..self
        }
    }

    fn hint_if(self, hint: Option<&str>) -> Report {
        match hint {
            Some(hint) => self.hint(hint),
            None => self,
        }
    }
}

impl FencedError {
    /// The one definition of each error: SQLSTATE, message, DETAIL and HINT.
    fn report(&self) -> Report {
        use PgSqlErrorCode::*;
        match self {
            FencedError::NullArgument { function, argument } => Report::new(
                ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!("{function}: argument \"{argument}\" must not be NULL"),
            )
            .detail("Only a timeout or an owner may be NULL (the default: no limit, no owner)."),
            FencedError::NullKey { function, argument } => Report::new(
                ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!("{function}: \"{argument}\" must not contain NULL"),
            ),
            FencedError::EmptyKeySet { function, argument } => Report::new(
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("{function}: \"{argument}\" must name at least one key"),
            ),
            FencedError::TooManyKeys {
                function,
                argument,
                limit,
            } => Report::new(
                ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!("{function}: \"{argument}\" may name at most {limit} keys"),
            )
            .hint(
                "Each key is a lock in the lock table (max_locks_per_transaction): lock a \
                 coarser key that stands for the set instead.",
            ),
            FencedError::NegativeTimeout => Report::new(
                ERRCODE_INVALID_PARAMETER_VALUE,
                "timeout must not be negative",
            )
            .hint("Pass '0' to try once without waiting."),
            FencedError::TimeoutTooLong => Report::new(
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("timeout must be at most {} ms", i32::MAX),
            )
            .hint("Use acquire_fenced(ns, id) without a timeout to wait without limit."),
            FencedError::InvalidArgument { message, hint } => {
                Report::new(ERRCODE_INVALID_PARAMETER_VALUE, message.clone()).hint_if(*hint)
            }
            FencedError::HotStandby => Report::new(
                ERRCODE_READ_ONLY_SQL_TRANSACTION,
                "fenced locks cannot be acquired on a hot standby",
            )
            .detail(
                "Advisory locks on a standby exclude only that standby's sessions, not holders on \
                 the primary, and a standby cannot draw new tokens.",
            )
            .hint("Connect to the primary server."),
            FencedError::LockNotAcquired {
                key,
                timeout_ms,
                holders,
            } => Report::new(
                ERRCODE_LOCK_NOT_AVAILABLE,
                match timeout_ms {
                    0 => format!("could not acquire fenced lock {key} without waiting"),
                    _ => format!("could not acquire fenced lock {key} within {timeout_ms} ms"),
                },
            )
            .detail(holders_detail(holders))
            .hint("Use try_acquire_fenced to skip a busy key without an error, or wait longer."),
            FencedError::ExtensionObjectMissing { name } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("\"{name}\" of the extension fenced_lock is missing"),
            )
            .hint(
                "Restore it from a dump of this database. Re-creating the extension needs DROP \
                 EXTENSION fenced_lock CASCADE, which also drops every enforce_fence trigger: \
                 see \"Repairing an installation\" in the README.",
            ),
            FencedError::NotPreloaded { view } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("{view} needs fenced_lock in shared_preload_libraries"),
            )
            .hint(
                "Add fenced_lock to shared_preload_libraries and restart the server: the \
                 counters live in shared memory.",
            ),
            FencedError::TokenNotReplicated => Report::new(
                ERRCODE_QUERY_CANCELED,
                "fencing token not confirmed by the synchronous standby",
            )
            .detail(
                "The wait for synchronous replication was cancelled before the standby confirmed \
                 the token, so a failover could issue it again; it was not returned.",
            )
            .hint("Retry the transaction once the synchronous standby is reachable."),
            FencedError::TokensExhausted { position } => Report::new(
                ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                format!(
                    "no fencing tokens left to draw: the token sequence is at {position}, too \
                     near the end of bigint for a block of fenced_lock.token_block tokens"
                ),
            )
            .hint(
                "Tokens this high were not reached by issuing tokens: the sequence was set there, \
                 or CREATE EXTENSION started above a fenced_lock.token_floor this high. Set the \
                 fences that hold such values back to real tokens, then re-create the extension \
                 with a lower floor.",
            ),
            FencedError::ScopeConflict { key, held } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "fenced lock {key} is already held by this session at {} scope",
                    held.name()
                ),
            )
            .detail("One key, one grant, one token: it cannot be held at both scopes at once.")
            .hint(match held {
                Scope::Session => {
                    "Use the session grant's token (current_fence), or release_fenced it first."
                }
                Scope::Transaction => {
                    "Use the transaction's grant, or take the session lock after the transaction \
                     ends."
                }
            }),
            FencedError::ModeConflict { key, held } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "fenced lock {key} is already held by this session in {} mode",
                    held.name()
                ),
            )
            .detail(
                "One key, one grant, one token: a shared grant is not upgraded to an exclusive \
                 one (two shared holders upgrading deadlock), nor an exclusive one downgraded.",
            )
            .hint("Take the mode the work needs once per transaction (or session grant)."),
            FencedError::DefinitionOutdated { function } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "{function} is a function of fenced_lock before 1.0.0, whose library is \
                     installed"
                ),
            )
            .hint(
                "Run ALTER EXTENSION fenced_lock UPDATE in this database, then call the 1.0 \
                 functions (docs/upgrading.md).",
            ),
            FencedError::LeaseNotAcquired {
                key,
                timeout_ms,
                lock_timeout,
                holder,
                permits,
            } => {
                let what = match permits {
                    Some(permits) => {
                        format!("a permit of lease semaphore {key} ({permits} permits)")
                    }
                    None => format!("lease {key}"),
                };
                let message = match (timeout_ms, lock_timeout) {
                    (0, false) => format!("could not acquire {what} without waiting"),
                    (_, false) => format!("could not acquire {what} within {timeout_ms} ms"),
                    (_, true) => {
                        format!("could not acquire {what} within lock_timeout ({timeout_ms} ms)")
                    }
                };
                let report = Report::new(ERRCODE_LOCK_NOT_AVAILABLE, message);
                // One holder is named for a lease, none for a semaphore's permit (one of many).
                match (holder, permits) {
                    (Some(owner), None) => report
                        .detail(format!("The lease is held by owner \"{owner}\"."))
                        .hint(
                            "Use try_acquire_lease to skip a busy lease without an error, or \
                             wait longer.",
                        ),
                    (None, None) => report.hint(
                        "Use try_acquire_lease to skip a busy lease without an error, or wait \
                         longer.",
                    ),
                    (_, Some(_)) => report.hint(
                        "Use try_acquire_lease_permit to skip a full semaphore without an \
                         error, or wait longer.",
                    ),
                }
            }
            FencedError::PermitNotAcquired {
                key,
                permits,
                timeout_ms,
                lock_timeout,
            } => Report::new(
                ERRCODE_LOCK_NOT_AVAILABLE,
                match (timeout_ms, lock_timeout) {
                    (_, true) => format!(
                        "no permit of fenced semaphore {key} ({permits} permits) came free \
                         within lock_timeout ({timeout_ms} ms)"
                    ),
                    (0, false) => format!(
                        "no permit of fenced semaphore {key} ({permits} permits) is free \
                         without waiting"
                    ),
                    (_, false) => format!(
                        "no permit of fenced semaphore {key} ({permits} permits) came free \
                         within {timeout_ms} ms"
                    ),
                },
            )
            .hint(
                "Use try_acquire_permit to skip a busy semaphore without an error, or wait longer.",
            ),
            FencedError::PermitDeadlock { key, holders } => Report::new(
                ERRCODE_T_R_DEADLOCK_DETECTED,
                format!("deadlock detected waiting for a permit of fenced semaphore {key}"),
            )
            .detail(format!(
                "{} This session waits for a permit, and a holder waits, directly or through \
                 others, for a lock this session holds.",
                holders_detail(holders)
            ))
            .hint(
                "Take keys and permits in one order in every transaction; retry the transaction.",
            ),
            FencedError::PermitSelfWait { key, permits } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "every permit of fenced semaphore {key} ({permits} permits) is held by this \
                     session"
                ),
            )
            .detail(
                "Only this session could free one, and it would wait for itself: the permits \
                 are held for other owners or at the other scope.",
            )
            .hint(POOLER_HINT),
            FencedError::HeldForAnotherOwner { key, owner } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("fenced lock {key} is already held by this session for another owner"),
            )
            .detail(held_for(owner.as_deref()))
            .hint(POOLER_HINT),
            FencedError::UndefinedColumn { table, column } => Report::new(
                ERRCODE_UNDEFINED_COLUMN,
                format!("column \"{column}\" of relation {table} does not exist"),
            ),
            FencedError::FenceColumnNotBigint {
                table,
                column,
                quoted_column,
                type_name,
            } => Report::new(
                ERRCODE_DATATYPE_MISMATCH,
                format!(
                    "fence column \"{column}\" of relation {table} has type {type_name}, not \
                     bigint"
                ),
            )
            .detail(
                "Tokens are bigint: they pass 2^31 after about a day at 25,000 grants a second, \
                 or after three failovers.",
            )
            .hint(format!(
                "ALTER TABLE {table} ALTER COLUMN {quoted_column} TYPE bigint;"
            )),
            FencedError::NotATable { table } => {
                Report::new(ERRCODE_WRONG_OBJECT_TYPE, format!("{table} is not a table"))
            }
            FencedError::NoSuchRow {
                table,
                key_column,
                key,
            } => Report::new(
                ERRCODE_NO_DATA_FOUND,
                format!("no row in {table} with \"{key_column}\" = {key}"),
            ),
            FencedError::UndefinedTable { oid } => Report::new(
                ERRCODE_UNDEFINED_TABLE,
                format!("relation with OID {oid} does not exist"),
            ),
            FencedError::RowNotUpdatable { table, key } => Report::new(
                ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!(
                    "fenced_update: row-level security on {table} does not let this role update \
                     the row with key {key}"
                ),
            )
            .detail(
                "The row is visible to this role, and its fence does not refuse the token, but no \
                 UPDATE policy of the table admits it; nothing was written.",
            ),
            FencedError::RowSkippedByTrigger { table, key } => Report::new(
                ERRCODE_TRIGGERED_ACTION_EXCEPTION,
                format!(
                    "fenced_update: a BEFORE UPDATE trigger on {table} skipped the row with key \
                     {key}"
                ),
            )
            .detail(
                "The row's fence does not refuse the token, but a trigger returned NULL for the \
                 row: nothing was written.",
            ),
            FencedError::ParallelMode { function } => Report::new(
                ERRCODE_INVALID_TRANSACTION_STATE,
                format!("{function} cannot run during a parallel operation"),
            )
            .detail(
                "A parallel worker's locks are not its leader's: a lock taken there would not \
                 exclude anyone once the worker exits, and a token drawn there would be nobody's.",
            )
            .hint(
                "Call it from a function marked PARALLEL UNSAFE (the default), not from one \
                 marked PARALLEL SAFE or RESTRICTED.",
            ),
            FencedError::ValueTooLong {
                function,
                argument,
                limit,
            } => Report::new(
                ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
                format!("{function}: \"{argument}\" must be at most {limit} bytes long"),
            )
            .hint(
                "An owner or a key is an identifier: use a shorter one (a UUID, a host and PID).",
            ),
            FencedError::UnloggedTokenSequence => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "the token sequence of fenced_lock is UNLOGGED: tokens would repeat after a crash",
            )
            .hint("Run ALTER SEQUENCE fencing_token_seq SET LOGGED as the extension's owner."),
            FencedError::LeaseTableAltered { what } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("fenced_lease_state has {what}, which the lease functions cannot maintain"),
            )
            .hint(
                "The lease functions write its rows directly, as PostgreSQL writes its catalogs: \
                 they fire no trigger and evaluate no index expression or predicate. Drop it; \
                 read the fenced_leases view instead.",
            ),
            FencedError::LeaseChangedAfterSnapshot { function, key } => Report::new(
                ERRCODE_T_R_SERIALIZATION_FAILURE,
                format!(
                    "{function}: the lease on {key} was changed by a transaction that committed \
                     after this transaction's snapshot"
                ),
            )
            .hint(
                "Retry the transaction, as for any serialization failure, or call the lease \
                 functions in autocommit.",
            ),
            FencedError::ReadOnlyLease { function } => Report::new(
                ERRCODE_READ_ONLY_SQL_TRANSACTION,
                format!("{function}: cannot write a lease in a read-only transaction"),
            )
            .hint(
                "On a hot standby, connect to the primary server; on the primary, call it in a \
                 read-write transaction.",
            ),
            FencedError::LeaseRowBusy { function, key } => Report::new(
                ERRCODE_LOCK_NOT_AVAILABLE,
                format!(
                    "{function}: the lease on {key} is being written by another open transaction"
                ),
            )
            .hint(
                "Call it again once that transaction ends (a takeover, or a renewal or release \
                 with the same token): renew_lease and release_lease never wait for it.",
            ),
            FencedError::Internal { what, error } => Report::new(
                ERRCODE_INTERNAL_ERROR,
                format!("fenced_lock: {what}: {error}"),
            )
            .hint("This is a bug in fenced_lock: please report it with the statement that failed."),
            FencedError::TriggerMisuse { message } => {
                Report::new(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED, message.clone()).hint(
                    "Use CREATE TRIGGER ... BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION \
                     enforce_fence('fence_column').",
                )
            }
            FencedError::UnknownNamespace { name } => Report::new(
                ERRCODE_UNDEFINED_OBJECT,
                format!("fenced lock namespace \"{name}\" is not registered"),
            )
            .hint("Register it first: SELECT register_namespace('name');"),
            FencedError::NamespaceTaken { message } => {
                Report::new(ERRCODE_UNIQUE_VIOLATION, message.clone())
            }
            FencedError::ForceReleaseOwnLock { key } => Report::new(
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("force_release: this session holds fenced lock {key} itself"),
            )
            .hint(
                "Release it with release_fenced, or end the transaction; force_release \
                 terminates other sessions only.",
            ),
        }
    }

    /// Raises this error as a PostgreSQL ERROR; the current transaction aborts.
    pub fn raise(self) -> ! {
        let Report {
            code,
            message,
            detail,
            hint,
        } = self.report();
        let mut report = ErrorReport::new(code, message, "fenced_lock");
        if let Some(detail) = detail {
            report = report.set_detail(detail);
        }
        if let Some(hint) = hint {
            report = report.set_hint(hint);
        }
        report.report(PgLogLevel::ERROR);
        unreachable!("an ERROR does not return")
    }
}

/// `name` quoted as an SQL identifier where it needs quotes.
pub(crate) fn quote_identifier(name: &str) -> String {
    let name = std::ffi::CString::new(name.replace('\0', "")).expect("NULs removed");
    unsafe { std::ffi::CStr::from_ptr(pg_sys::quote_identifier(name.as_ptr())) }
        .to_string_lossy()
        .into_owned()
}

/// From _PG_init. pgrx appends a captured Rust backtrace to the DETAIL of every PostgreSQL
/// error it re-raises when the server's environment sets RUST_BACKTRACE, so what clients saw
/// would depend on how the server was started. RUST_LIB_BACKTRACE takes precedence over it
/// for `Backtrace::capture` only (a panic's message in the server log still follows
/// RUST_BACKTRACE), and the backend is single-threaded, so setting it here is safe.
pub fn keep_backtraces_out_of_errors() {
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
}

pub(crate) fn holders_detail(holders: &[i32]) -> String {
    let described: Vec<String> = holders
        .iter()
        .map(|&pid| match pid {
            0 => "a prepared transaction".to_string(),
            pid => format!("PID {pid}"),
        })
        .collect();
    match described.len() {
        0 => "No session holds the key any more; it was released as the wait ended.".into(),
        _ => format!("Held by {}.", described.join(", ")),
    }
}

/// Behind a transaction-mode pooler a server session, and its session locks, pass from client
/// to client.
const POOLER_HINT: &str = "Session-scoped locks belong to one server connection, which a \
     transaction-mode pooler (PgBouncer, RDS Proxy, serverless drivers) hands to whichever \
     client comes next. Pass the same owner argument to acquire and release, or use a \
     lease (acquire_lease).";

/// Whom a session grant was taken for, as a DETAIL.
fn held_for(owner: Option<&str>) -> String {
    match owner {
        Some(owner) => format!("It was taken for owner \"{owner}\"."),
        None => "It was taken without an owner.".into(),
    }
}

/// release_fenced was called for a session grant taken for another owner (or for one, by a
/// caller that gave none): nothing is released.
pub fn warn_held_for_another_owner(lock: Lockable, owner: Option<&str>) {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!(
            "{} is held by this session for another owner",
            described(lock)
        ),
        "fenced_lock",
    )
    .set_detail(format!("{} Nothing was released.", held_for(owner)))
    .set_hint(POOLER_HINT)
    .report(PgLogLevel::WARNING);
}

/// release_fenced of a key this session does not hold at session scope: most often the
/// release ran on another server connection than the acquire (a transaction-mode pooler).
pub fn warn_not_held(lock: Lockable, held_by_transaction: bool) {
    let detail = match held_by_transaction {
        true => {
            "It is held at transaction scope and ends with its transaction; nothing was released."
        }
        false => "Nothing was released.",
    };
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("{} is not held by this session", described(lock)),
        "fenced_lock",
    )
    .set_detail(detail)
    .set_hint(POOLER_HINT)
    .report(PgLogLevel::WARNING);
}

/// "fenced lock (ns, id)", or "permit 3 of fenced semaphore (ns, id)".
fn described(lock: Lockable) -> String {
    match lock.permit {
        0 => format!("fenced lock {}", lock.key),
        slot => format!("permit {slot} of fenced semaphore {}", lock.key),
    }
}

/// A parallel worker (or its leader, during a parallel operation) neither locks, unlocks nor
/// draws a token (25000): only a wrapper labelled PARALLEL SAFE gets a fenced_lock function
/// there, and a worker's locks are not the session's.
pub fn refuse_in_parallel_mode(function: &str) {
    if crate::unguarded::in_parallel_mode() {
        FencedError::ParallelMode {
            function: function.to_string(),
        }
        .raise();
    }
}

/// A transaction-scoped lock taken in autocommit mode ends with its statement: an ERROR
/// (25P01), or with `fenced_lock.outside_transaction = warning` a WARNING once per
/// transaction, and the call succeeds.
pub fn outside_transaction_block(function: &str, key: LockKey, level: PgLogLevel) {
    let report = ErrorReport::new(
        PgSqlErrorCode::ERRCODE_NO_ACTIVE_SQL_TRANSACTION,
        format!("{function} called outside a transaction block"),
        "fenced_lock",
    )
    .set_detail(format!(
        "The transaction-scoped lock {key} would be released when this statement ends, before \
         any later statement could use its token."
    ));
    let report = match level {
        PgLogLevel::WARNING => {
            report.set_hint("Run the acquisition and the work it guards inside BEGIN ... COMMIT.")
        }
        _ => report.set_hint(
            "Run BEGIN first: BEGIN; SELECT acquire_fenced(...); <the guarded work>; COMMIT; \
             (SET fenced_lock.outside_transaction = warning takes a statement-long lock.)",
        ),
    };
    report.report(level);
}

/// SQLSTATE `SF001` ("stale fence"): a write carried a fencing token lower than one the
/// resource already accepted. PostgreSQL has no code for it, so fenced_lock defines one in a
/// class (SF) that PostgreSQL does not use.
pub const STALE_FENCING_TOKEN: &[u8; 5] = b"SF001";

/// A write refused because its token is stale: what refused it, the token it holds, and the
/// token offered (None for a NULL fence).
pub struct StaleToken {
    pub resource: String,
    pub accepted: i64,
    pub offered: Option<i64>,
}

/// PostgreSQL's encoding of a five-character SQLSTATE (MAKE_SQLSTATE).
pub(crate) fn make_sqlstate(code: &[u8; 5]) -> i32 {
    code.iter().enumerate().fold(0, |acc, (i, &c)| {
        acc | ((c.wrapping_sub(b'0') as i32 & 0x3f) << (6 * i))
    })
}

/// An ERROR whose SQLSTATE pgrx's `PgSqlErrorCode` cannot carry: fenced_lock's own SF001, or a
/// code PostgreSQL raised inside a fenced_lock function that pgrx would turn into XX000 (a
/// user's RAISE ... USING ERRCODE in a trigger, a domain check's custom code). It is raised by
/// PostgreSQL's error machinery directly, and only at a bare entry point
/// (`raw_error_entry!`), where no Rust frame is left to unwind.
pub struct RawError {
    sqlstate: i32,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
}

impl StaleToken {
    /// How far below the accepted token the offered one is, and fenced_lock.failover_skip, when
    /// that is more than the skip: far more than a late holder's lag, so the lock server's
    /// tokens themselves went back.
    fn went_back(&self) -> Option<(i64, i64)> {
        let skip = crate::settings::failover_skip();
        let below = self.accepted.saturating_sub(self.offered?);
        (skip > 0 && below > skip).then_some((below, skip))
    }

    /// For the functions that return false for a stale token (fenced_update, fence_check):
    /// when the tokens went back, the same report as SF001's, as a WARNING (to the caller and
    /// the server's log), so that the operator sees why every holder is refused.
    pub fn warn_if_tokens_went_back(self) {
        if self.went_back().is_some() {
            // WARNING returns: no longjmp crosses the caller's Rust frames.
            unsafe { RawError::from(self).report(PgLogLevel::WARNING) };
        }
    }
}

impl From<StaleToken> for RawError {
    fn from(stale: StaleToken) -> RawError {
        let offered = stale.offered.map_or("NULL".to_string(), |t| t.to_string());
        let message = format!(
            "stale fencing token {offered} for {}: token {} was already accepted",
            stale.resource, stale.accepted
        );
        let (detail, hint) = match stale.went_back() {
            Some((below, skip)) => (
                format!(
                    "The token is {below} below the accepted one, more than \
                     fenced_lock.failover_skip ({skip}): unless its holder was paused for hours, \
                     the lock server now issues tokens below ones it (or a server it replaced) \
                     issued before, after a split brain whose discarded side handed out the \
                     higher ones or a restore from an older backup. Every later holder is refused \
                     too."
                ),
                match stale.accepted > crate::types::MAX_ADVANCE {
                    true => "The accepted token is above 2^62, more than advance_fencing_tokens \
                             takes: the resource holds a sentinel, not a token the lock server \
                             issued. Set its fence to a real token."
                        .into(),
                    false => format!(
                        "On the lock server, as the extension's owner: SELECT \
                         advance_fencing_tokens({}); then acquire again.",
                        stale.accepted
                    ),
                },
            ),
            _ => (
                "A later holder of the lock already wrote with a larger token: this holder's \
                 lease is over."
                    .into(),
                "Stop this work; do not retry with the same token. Acquire the lock again for a \
                 new one."
                    .into(),
            ),
        };
        RawError {
            sqlstate: make_sqlstate(STALE_FENCING_TOKEN),
            message,
            detail: Some(detail),
            hint: Some(hint),
        }
    }
}

impl RawError {
    /// The error PostgreSQL raised, as pgrx caught it (message, DETAIL, HINT; never pgrx's
    /// backtrace), with the SQLSTATE PostgreSQL gave it (`sqlstate_recorder`).
    fn original(report: &ErrorReportWithLevel, sqlstate: i32) -> RawError {
        RawError {
            sqlstate,
            message: report.message().to_string(),
            detail: report.detail().map(String::from),
            hint: report.hint().map(String::from),
        }
    }

    /// fenced_update: a value that its column's type (or domain) rejects, with the column
    /// named and the type's own SQLSTATE, custom domain codes included.
    pub fn value_does_not_fit(
        table: &str,
        column: &str,
        report: &ErrorReportWithLevel,
        sqlstate: Option<i32>,
    ) -> RawError {
        let sqlstate = sqlstate.unwrap_or(report.sql_error_code() as i32);
        let mut error = RawError::original(report, sqlstate);
        error.message = format!(
            "value for column \"{column}\" of relation {table}: {}",
            error.message
        );
        error
    }

    /// Unwinds to the bare entry point, which raises it. Only valid inside `raw_error_entry!`.
    pub fn raise_at_entry(self) -> ! {
        std::panic::panic_any(self)
    }

    /// Raises this error.
    ///
    /// # Safety
    /// Every Rust frame between this call and the PostgreSQL caller must be free of values that
    /// need dropping.
    unsafe fn raise(self) -> ! {
        unsafe { self.report(PgLogLevel::ERROR) };
        unreachable!("errfinish(ERROR) does not return")
    }

    /// Reports this at `level`: ERROR does not return (see `raise`); WARNING and lower do.
    unsafe fn report(self, level: PgLogLevel) {
        unsafe extern "C-unwind" {
            fn errcode(sqlerrcode: core::ffi::c_int) -> core::ffi::c_int;
            fn errmsg_internal(fmt: *const core::ffi::c_char, ...) -> core::ffi::c_int;
            fn errdetail_internal(fmt: *const core::ffi::c_char, ...) -> core::ffi::c_int;
            fn errhint(fmt: *const core::ffi::c_char, ...) -> core::ffi::c_int;
            fn errstart(elevel: core::ffi::c_int, domain: *const core::ffi::c_char) -> bool;
            fn errfinish(
                filename: *const core::ffi::c_char,
                lineno: core::ffi::c_int,
                funcname: *const core::ffi::c_char,
            );
        }
        // Copy every text into palloc'd memory; the Rust values are dropped before the longjmp.
        let palloc = |text: Option<String>| {
            text.map(|text| {
                let text = std::ffi::CString::new(text.replace('\0', "")).expect("NULs removed");
                unsafe { pg_sys::pstrdup(text.as_ptr()) }
            })
        };
        let sqlstate = self.sqlstate;
        let message = palloc(Some(self.message)).expect("a message");
        let (detail, hint) = (palloc(self.detail), palloc(self.hint));
        unsafe {
            if errstart(level as _, std::ptr::null()) {
                errcode(sqlstate);
                errmsg_internal(c"%s".as_ptr(), message);
                if let Some(detail) = detail {
                    errdetail_internal(c"%s".as_ptr(), detail);
                }
                if let Some(hint) = hint {
                    errhint(c"%s".as_ptr(), hint);
                }
                errfinish(c"fenced_lock".as_ptr(), 0, c"raw_error".as_ptr());
            }
        }
    }
}

thread_local! {
    /// The SQLSTATE of the last error PostgreSQL reported inside a `raw_error_entry!`
    /// function: pgrx keeps only the codes its enum knows and reports any other as XX000.
    static LAST_SQLSTATE: std::cell::Cell<Option<i32>> = const { std::cell::Cell::new(None) };
}

#[pg_guard]
unsafe extern "C-unwind" fn record_sqlstate(_arg: *mut core::ffi::c_void) {
    unsafe extern "C-unwind" {
        fn geterrcode() -> core::ffi::c_int;
    }
    LAST_SQLSTATE.set(Some(unsafe { geterrcode() }));
}

/// The SQLSTATE PostgreSQL gave the error pgrx caught as `report` inside a
/// `raw_error_entry!` function.
pub fn original_sqlstate(report: &ErrorReportWithLevel) -> Option<i32> {
    LAST_SQLSTATE
        .get()
        .filter(|&code| PgSqlErrorCode::from(code) == report.sql_error_code())
}

/// Runs `body` for a bare version-1 C function, so that errors keep their SQLSTATE: a
/// `RawError` (returned, or unwound with `raise_at_entry`) and any PostgreSQL error with a
/// code pgrx cannot carry are raised as they are; every other error goes through pgrx as for
/// any `#[pg_extern]` function.
///
/// # Safety
/// Called from a bare `extern "C"` entry point with the function manager's `fcinfo`.
pub unsafe fn run_raw_entry(
    fcinfo: pg_sys::FunctionCallInfo,
    body: fn(pg_sys::FunctionCallInfo) -> Result<pg_sys::Datum, RawError>,
) -> pg_sys::Datum {
    let error = match unsafe { run_recording_sqlstates(fcinfo, body) } {
        Ok(datum) => return datum,
        Err(error) => error,
    };
    // Nothing that needs dropping is left in this frame or its callers (PostgreSQL's).
    unsafe { error.raise() }
}

unsafe fn run_recording_sqlstates(
    fcinfo: pg_sys::FunctionCallInfo,
    body: fn(pg_sys::FunctionCallInfo) -> Result<pg_sys::Datum, RawError>,
) -> Result<pg_sys::Datum, RawError> {
    let mut recorder = pg_sys::ErrorContextCallback {
        previous: unsafe { pg_sys::error_context_stack },
        callback: Some(record_sqlstate),
        arg: std::ptr::null_mut(),
    };
    LAST_SQLSTATE.set(None);
    unsafe { pg_sys::error_context_stack = &mut recorder };
    let outcome = std::panic::catch_unwind(|| body(fcinfo));
    unsafe { pg_sys::error_context_stack = recorder.previous };
    let payload = match outcome {
        Ok(result) => return result,
        Err(payload) => payload,
    };
    let payload = match payload.downcast::<RawError>() {
        Ok(error) => return Err(*error),
        Err(payload) => payload,
    };
    let payload = match payload.downcast::<CaughtError>() {
        // Unwound from a PgTryBuilder handler: pgrx wrapped it.
        Ok(caught) => match *caught {
            CaughtError::RustPanic { payload, ereport } => match payload.downcast::<RawError>() {
                Ok(error) => return Err(*error),
                Err(payload) => Box::new(CaughtError::RustPanic { payload, ereport }),
            },
            CaughtError::PostgresError(report) => match original_sqlstate(&report) {
                Some(sqlstate) => return Err(RawError::original(&report, sqlstate)),
                None => Box::new(CaughtError::PostgresError(report)),
            },
            other => Box::new(other) as Box<dyn std::any::Any + Send>,
        },
        Err(payload) => payload,
    };
    // Any other error: pgrx reports it, as it would for a #[pg_extern] function.
    unsafe { pg_sys::panic::pgrx_extern_c_guard(|| std::panic::resume_unwind(payload)) }
}

/// Declares a bare version-1 C function `$name` whose errors keep their SQLSTATE
/// (`errors::run_raw_entry`): a stale token is refused with SF001, and an error PostgreSQL
/// raises inside (a trigger's SF001, a domain's custom code) reaches the caller unchanged.
macro_rules! raw_error_entry {
    ($name:ident, $finfo:ident, $body:path) => {
        #[no_mangle]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }

        /// # Safety
        /// Called by PostgreSQL's function manager with a valid `fcinfo`.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            unsafe { crate::errors::run_raw_entry(fcinfo, $body) }
        }
    };
}
pub(crate) use raw_error_entry;

#[cfg(test)]
mod tests {
    use super::FencedError;
    use crate::types::LockKey;
    use pgrx::PgSqlErrorCode::*;

    const KEY: LockKey = LockKey { ns: 1, id: 2 };

    fn lease(timeout_ms: i32, lock_timeout: bool, permits: Option<u16>) -> FencedError {
        FencedError::LeaseNotAcquired {
            key: KEY,
            timeout_ms,
            lock_timeout,
            holder: Some("worker-b".into()),
            permits,
        }
    }

    fn permit(timeout_ms: i32, lock_timeout: bool) -> FencedError {
        FencedError::PermitNotAcquired {
            key: KEY,
            permits: 2,
            timeout_ms,
            lock_timeout,
        }
    }

    // Every wait that runs out is 55P03, says which bound ended it, and names the try_ form.
    #[test]
    fn waits_that_run_out_are_55p03_naming_their_bound() {
        let cases = [
            (
                lease(0, false, None),
                "could not acquire lease (1, 2) without waiting",
            ),
            (
                lease(50, false, None),
                "could not acquire lease (1, 2) within 50 ms",
            ),
            (
                lease(50, true, None),
                "could not acquire lease (1, 2) within lock_timeout (50 ms)",
            ),
            (
                lease(30, false, Some(3)),
                "could not acquire a permit of lease semaphore (1, 2) (3 permits) within 30 ms",
            ),
            (
                permit(0, false),
                "no permit of fenced semaphore (1, 2) (2 permits) is free without waiting",
            ),
            (
                permit(20, true),
                "no permit of fenced semaphore (1, 2) (2 permits) came free within \
                 lock_timeout (20 ms)",
            ),
        ];
        for (error, message) in cases {
            let report = error.report();
            assert_eq!(report.code, ERRCODE_LOCK_NOT_AVAILABLE);
            assert_eq!(report.message, message);
            assert!(report
                .hint
                .is_some_and(|hint| hint.contains("try_acquire_")));
        }
        // The holder is named for a lease, not for a semaphore's permit (one of many).
        assert_eq!(
            lease(50, false, None).report().detail.as_deref(),
            Some("The lease is held by owner \"worker-b\".")
        );
        assert!(lease(50, false, Some(3)).report().detail.is_none());
    }

    #[test]
    fn a_definition_older_than_the_library_asks_for_the_update() {
        let report = FencedError::DefinitionOutdated {
            function: "acquire_fenced(integer,integer,interval)".into(),
        }
        .report();
        assert_eq!(report.code, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE);
        assert!(report
            .hint
            .is_some_and(|hint| hint.contains("ALTER EXTENSION fenced_lock UPDATE")));
    }
}
