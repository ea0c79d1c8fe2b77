//! Every failure fenced_lock reports, and the one mapping from each to its SQLSTATE,
//! message, DETAIL and HINT. The README's error table mirrors this file.

use crate::grants::Scope;
use crate::locking::LockKey;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
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
    /// An object of the extension (token sequence, registry) is gone.
    ExtensionObjectMissing {
        name: String,
    },
    /// The key is already held by this backend at the other scope.
    ScopeConflict {
        key: LockKey,
        held: Scope,
    },
    /// The wait for synchronous standbys to confirm the token's WAL ended without it.
    TokenNotReplicated,
    /// An argument of the resource side has the wrong shape.
    InvalidArgument {
        message: String,
        hint: Option<&'static str>,
    },
    UndefinedColumn {
        table: String,
        column: String,
    },
    FenceColumnNotInteger {
        table: String,
        column: String,
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
    /// A value of `changes` that its column's type rejects; the code is the type's own.
    ValueDoesNotFit {
        code: PgSqlErrorCode,
        table: String,
        column: String,
        message: String,
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

impl FencedError {
    fn code(&self) -> PgSqlErrorCode {
        use PgSqlErrorCode::*;
        match self {
            FencedError::NullArgument { .. } => ERRCODE_NULL_VALUE_NOT_ALLOWED,
            FencedError::NegativeTimeout
            | FencedError::TimeoutTooLong
            | FencedError::InvalidArgument { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            FencedError::HotStandby => ERRCODE_READ_ONLY_SQL_TRANSACTION,
            FencedError::LockNotAcquired { .. } => ERRCODE_LOCK_NOT_AVAILABLE,
            FencedError::ExtensionObjectMissing { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            FencedError::TokenNotReplicated => ERRCODE_QUERY_CANCELED,
            FencedError::ScopeConflict { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            FencedError::UndefinedColumn { .. } => ERRCODE_UNDEFINED_COLUMN,
            FencedError::FenceColumnNotInteger { .. } => ERRCODE_DATATYPE_MISMATCH,
            FencedError::NotATable { .. } => ERRCODE_WRONG_OBJECT_TYPE,
            FencedError::NoSuchRow { .. } => ERRCODE_NO_DATA_FOUND,
            FencedError::ValueDoesNotFit { code, .. } => *code,
            FencedError::TriggerMisuse { .. } => ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
            FencedError::UnknownNamespace { .. } => ERRCODE_UNDEFINED_OBJECT,
            FencedError::NamespaceTaken { .. } => ERRCODE_UNIQUE_VIOLATION,
            FencedError::ForceReleaseOwnLock { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
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
            FencedError::ExtensionObjectMissing { name } => {
                format!("\"{name}\" of the extension fenced_lock is missing")
            }
            FencedError::TokenNotReplicated => {
                "fencing token not confirmed by the synchronous standby".into()
            }
            FencedError::ScopeConflict { key, held } => format!(
                "fenced lock {key} is already held by this session at {} scope",
                held.name()
            ),
            FencedError::InvalidArgument { message, .. } => message.clone(),
            FencedError::UndefinedColumn { table, column } => {
                format!("column \"{column}\" of relation {table} does not exist")
            }
            FencedError::FenceColumnNotInteger {
                table,
                column,
                type_name,
            } => format!(
                "fence column \"{column}\" of relation {table} has type {type_name}, not an \
                 integer type"
            ),
            FencedError::NotATable { table } => format!("{table} is not a table"),
            FencedError::NoSuchRow {
                table,
                key_column,
                key,
            } => format!("no row in {table} with \"{key_column}\" = {key}"),
            FencedError::ValueDoesNotFit {
                table,
                column,
                message,
                ..
            } => format!("value for column \"{column}\" of relation {table}: {message}"),
            FencedError::TriggerMisuse { message } => message.clone(),
            FencedError::UnknownNamespace { name } => {
                format!("fenced lock namespace \"{name}\" is not registered")
            }
            FencedError::NamespaceTaken { message } => message.clone(),
            FencedError::ForceReleaseOwnLock { key } => {
                format!("force_release: this session holds fenced lock {key} itself")
            }
        }
    }

    fn detail(&self) -> Option<String> {
        match self {
            FencedError::NullArgument { .. } => {
                Some("Every argument of a fenced_lock function is required.".into())
            }
            FencedError::HotStandby => Some(
                "Advisory locks on a standby exclude only that standby's sessions, not holders on \
                 the primary, and a standby cannot draw new tokens."
                    .into(),
            ),
            FencedError::LockNotAcquired { holders, .. } => Some(holders_detail(holders)),
            FencedError::ScopeConflict { .. } => Some(
                "One key, one grant, one token: it cannot be held at both scopes at once.".into(),
            ),
            FencedError::TokenNotReplicated => Some(
                "The wait for synchronous replication was cancelled before the standby confirmed \
                 the token, so a failover could issue it again; it was not returned."
                    .into(),
            ),
            _ => None,
        }
    }

    fn hint(&self) -> Option<String> {
        let hint = match self {
            FencedError::NegativeTimeout => "Pass '0' to try once without waiting.",
            FencedError::TimeoutTooLong => {
                "Use acquire_fenced(ns, id) without a timeout to wait without limit."
            }
            FencedError::HotStandby => "Connect to the primary server.",
            FencedError::LockNotAcquired { .. } => {
                "Use try_acquire_fenced to skip a busy key without an error, or wait longer."
            }
            FencedError::ExtensionObjectMissing { .. } => {
                "Drop and create the extension fenced_lock again."
            }
            FencedError::TokenNotReplicated => {
                "Retry the transaction once the synchronous standby is reachable."
            }
            FencedError::ScopeConflict {
                held: Scope::Session,
                ..
            } => "Use the session grant's token (current_fence), or release_fenced it first.",
            FencedError::ScopeConflict { .. } => {
                "Use the transaction's grant, or take the session lock after the transaction ends."
            }
            FencedError::InvalidArgument { hint, .. } => return hint.map(String::from),
            FencedError::FenceColumnNotInteger { .. } => {
                "The fence column must be smallint, integer or bigint."
            }
            FencedError::UnknownNamespace { .. } => {
                "Register it first: SELECT register_namespace('name');"
            }
            FencedError::ForceReleaseOwnLock { .. } => {
                "Release it with release_fenced, or end the transaction; force_release \
                 terminates other sessions only."
            }
            FencedError::TriggerMisuse { .. } => {
                "Use CREATE TRIGGER ... BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION \
                 enforce_fence('fence_column')."
            }
            _ => return None,
        };
        Some(hint.into())
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

/// release_fenced of a key this session does not hold at session scope: most often the
/// release ran on another server connection than the acquire (a transaction-mode pooler).
pub fn warn_not_held(key: LockKey, held_by_transaction: bool) {
    let detail = match held_by_transaction {
        true => {
            "It is held at transaction scope and ends with its transaction; nothing was released."
        }
        false => "Nothing was released.",
    };
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("fenced lock {key} is not held by this session"),
        "fenced_lock",
    )
    .set_detail(detail)
    .set_hint(
        "Session-scoped locks belong to one server connection. Behind a transaction-mode \
         connection pooler the release can run on another connection than the acquire; use a \
         dedicated connection for session locks.",
    )
    .report(PgLogLevel::WARNING);
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

impl StaleToken {
    fn message(&self) -> String {
        let offered = self.offered.map_or("NULL".to_string(), |t| t.to_string());
        format!(
            "stale fencing token {offered} for {}: token {} was already accepted",
            self.resource, self.accepted
        )
    }
}

/// PostgreSQL's encoding of a five-character SQLSTATE (MAKE_SQLSTATE).
pub(crate) fn make_sqlstate(code: &[u8; 5]) -> i32 {
    code.iter().enumerate().fold(0, |acc, (i, &c)| {
        acc | ((c.wrapping_sub(b'0') as i32 & 0x3f) << (6 * i))
    })
}

/// Raises SF001 for `stale`. pgrx reports only PostgreSQL's own SQLSTATEs, so this drives the
/// error machinery itself. Only `resource::with_stale_token_check` calls it, from a bare
/// `extern "C"` frame that holds nothing to drop: the longjmp skips no destructor.
///
/// # Safety
/// Every Rust frame between this call and the PostgreSQL caller must be free of values that
/// need dropping.
pub unsafe fn raise_stale_token(stale: StaleToken) -> ! {
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
    let [message, detail, hint] = [
        stale.message(),
        "A later holder of the lock already wrote with a larger token: this holder's lease \
         is over."
            .to_string(),
        "Stop this work; do not retry with the same token. Acquire the lock again for a new one."
            .to_string(),
    ]
    .map(|text| {
        let text = std::ffi::CString::new(text.replace('\0', "")).expect("NULs were removed");
        unsafe { pg_sys::pstrdup(text.as_ptr()) }
    });
    drop(stale);
    unsafe {
        if errstart(PgLogLevel::ERROR as _, std::ptr::null()) {
            errcode(make_sqlstate(STALE_FENCING_TOKEN));
            errmsg_internal(c"%s".as_ptr(), message);
            errdetail_internal(c"%s".as_ptr(), detail);
            errhint(c"%s".as_ptr(), hint);
            errfinish(c"fenced_lock".as_ptr(), 0, c"raise_stale_token".as_ptr());
        }
    }
    unreachable!("errfinish(ERROR) does not return")
}
