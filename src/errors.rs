//! Every failure fenced_lock reports, and the one mapping from each to its SQLSTATE,
//! message, DETAIL and HINT. The README's error table mirrors this file.

use crate::locking::LockKey;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

pub enum FencedError {
    /// An argument was NULL; a NULL result would be mistaken for "busy".
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
    TokenSequenceMissing,
    /// The wait for synchronous standbys to confirm the token's WAL ended without it.
    TokenNotReplicated,
}

impl FencedError {
    fn code(&self) -> PgSqlErrorCode {
        use PgSqlErrorCode::*;
        match self {
            FencedError::NullArgument { .. } => ERRCODE_NULL_VALUE_NOT_ALLOWED,
            FencedError::NegativeTimeout | FencedError::TimeoutTooLong => {
                ERRCODE_INVALID_PARAMETER_VALUE
            }
            FencedError::HotStandby => ERRCODE_READ_ONLY_SQL_TRANSACTION,
            FencedError::LockNotAcquired { .. } => ERRCODE_LOCK_NOT_AVAILABLE,
            FencedError::TokenSequenceMissing => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            FencedError::TokenNotReplicated => ERRCODE_QUERY_CANCELED,
        }
    }

    fn message(&self) -> String {
        match self {
            FencedError::NullArgument { function, argument } => {
                format!("{function}: argument \"{argument}\" must not be NULL")
            }
            FencedError::NegativeTimeout => "timeout must not be negative".into(),
            FencedError::TimeoutTooLong => {
                format!("timeout must be at most {} ms", i32::MAX)
            }
            FencedError::HotStandby => "fenced locks cannot be acquired on a hot standby".into(),
            FencedError::LockNotAcquired {
                key, timeout_ms: 0, ..
            } => format!("could not acquire fenced lock {key} without waiting"),
            FencedError::LockNotAcquired {
                key, timeout_ms, ..
            } => format!("could not acquire fenced lock {key} within {timeout_ms} ms"),
            FencedError::TokenSequenceMissing => {
                "the fencing token sequence of fenced_lock is missing".into()
            }
            FencedError::TokenNotReplicated => {
                "fencing token not confirmed by the synchronous standby".into()
            }
        }
    }

    fn detail(&self) -> Option<String> {
        match self {
            FencedError::NullArgument { .. } => {
                Some("Every argument of a fenced lock function is required.".into())
            }
            FencedError::HotStandby => Some(
                "Advisory locks on a standby exclude only that standby's sessions, not holders on \
                 the primary, and a standby cannot draw new tokens."
                    .into(),
            ),
            FencedError::LockNotAcquired { holders, .. } => Some(holders_detail(holders)),
            FencedError::TokenNotReplicated => Some(
                "The wait for synchronous replication was cancelled before the standby confirmed \
                 the token, so a failover could issue it again; it was not returned."
                    .into(),
            ),
            _ => None,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            FencedError::NullArgument { .. } => None,
            FencedError::NegativeTimeout => Some("Pass '0' to try once without waiting.".into()),
            FencedError::TimeoutTooLong => {
                Some("Use acquire_fenced(ns, id) without a timeout to wait without limit.".into())
            }
            FencedError::HotStandby => Some("Connect to the primary server.".into()),
            FencedError::LockNotAcquired { .. } => Some(
                "Use try_acquire_fenced to skip a busy key without an error, or wait longer."
                    .into(),
            ),
            FencedError::TokenSequenceMissing => {
                Some("Drop and create the extension fenced_lock again.".into())
            }
            FencedError::TokenNotReplicated => {
                Some("Retry the transaction once the synchronous standby is reachable.".into())
            }
        }
    }

    /// Raises this error as a PostgreSQL ERROR; the current transaction aborts.
    pub fn raise(self) -> ! {
        let mut report = ErrorReport::new(self.code(), self.message(), "fenced_lock");
        if let Some(detail) = self.detail() {
            report = report.set_detail(detail);
        }
        if let Some(hint) = self.hint() {
            report = report.set_hint(hint);
        }
        report.report(PgLogLevel::ERROR);
        unreachable!("an ERROR does not return")
    }
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

/// A transaction-scoped lock taken in autocommit mode ends with its statement: say so once per
/// transaction, but let the call succeed.
pub fn warn_outside_transaction_block(function: &str, key: LockKey) {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_NO_ACTIVE_SQL_TRANSACTION,
        format!("{function} called outside a transaction block"),
        "fenced_lock",
    )
    .set_detail(format!(
        "The transaction-scoped lock {key} is released when this statement ends."
    ))
    .set_hint("Run the acquisition and the work it guards inside BEGIN ... COMMIT.")
    .report(PgLogLevel::WARNING);
}
