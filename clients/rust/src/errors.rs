//! Typed errors, one kind per SQLSTATE a caller acts on differently (the README's error table).

use std::fmt;

use tokio_postgres::error::SqlState;

/// What a caller does about an error: the kinds of [`Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// SF001: a write carried a token lower than one the resource already accepted. Stop the
    /// work; acquire again for a new token.
    StaleToken,
    /// 55P03, or a lease another owner holds after the wait asked for: nothing was taken.
    LockBusy,
    /// 25P01: a transaction-scoped lock asked for outside a transaction.
    NotInTransaction,
    /// 40001 or 40P01: roll back and retry the transaction.
    Retryable,
    /// 25006: a read-only transaction or a hot standby, where no token can be drawn.
    ReadOnly,
    /// SQLSTATE class 08, 57P01-57P03, or the connection closed: any lock on it is lost.
    ConnectionLost,
    /// The lease is lost ([`Lease::check`](crate::Lease::check)); `reason` says how.
    LeaseLost,
    /// A bad argument (a duration out of range), refused before anything is sent.
    InvalidArgument,
    /// Any other error of the driver or the server.
    Other,
}

/// A stale token's figures, from the server's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// The token the write carried (None for NULL).
    pub offered: Option<i64>,
    /// The highest token the resource had accepted.
    pub accepted: i64,
    /// The resource: `table key` for a row, the name for a ledger's resource.
    pub resource: String,
}

/// Every error of this crate: its [`ErrorKind`], and for one the server raised its SQLSTATE,
/// message, detail and hint; the driver's error as its [`source`](std::error::Error::source).
#[derive(Debug)]
pub struct Error(Box<Inner>);

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    message: String,
    sqlstate: Option<String>,
    detail: Option<String>,
    hint: Option<String>,
    stale: Option<Stale>,
    reason: Option<String>,
    source: Option<tokio_postgres::Error>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error(Box::new(Inner {
            kind,
            message: message.into(),
            sqlstate: None,
            detail: None,
            hint: None,
            stale: None,
            reason: None,
            source: None,
        }))
    }

    pub(crate) fn lease_lost(reason: &str) -> Self {
        let mut error = Error::new(ErrorKind::LeaseLost, format!("the lease is lost: {reason}"));
        error.0.reason = Some(reason.to_owned());
        error
    }

    /// What the caller does about it.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }
    /// The SQLSTATE, for an error the server raised (and 25P01 and the like the library maps).
    pub fn sqlstate(&self) -> Option<&str> {
        self.0.sqlstate.as_deref()
    }
    /// The server's DETAIL.
    pub fn detail(&self) -> Option<&str> {
        self.0.detail.as_deref()
    }
    /// The server's HINT.
    pub fn hint(&self) -> Option<&str> {
        self.0.hint.as_deref()
    }
    /// For [`ErrorKind::StaleToken`]: both tokens and the resource.
    pub fn stale(&self) -> Option<&Stale> {
        self.0.stale.as_ref()
    }
    /// For [`ErrorKind::LeaseLost`]: how the lease was lost.
    pub fn reason(&self) -> Option<&str> {
        self.0.reason.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

fn kind_of(code: &str) -> ErrorKind {
    match code {
        "SF001" => ErrorKind::StaleToken,
        "55P03" => ErrorKind::LockBusy,
        "25P01" => ErrorKind::NotInTransaction,
        "40001" | "40P01" => ErrorKind::Retryable,
        "25006" => ErrorKind::ReadOnly,
        // admin_shutdown, crash_shutdown, cannot_connect_now: the session is gone.
        "57P01" | "57P02" | "57P03" => ErrorKind::ConnectionLost,
        code if code.starts_with("08") => ErrorKind::ConnectionLost,
        _ => ErrorKind::Other,
    }
}

/// "stale fencing token OFFERED for RESOURCE: token ACCEPTED was already accepted".
fn parse_stale(message: &str) -> Option<Stale> {
    let rest = &message[message.find("stale fencing token ")? + "stale fencing token ".len()..];
    let (offered, rest) = rest.split_once(" for ")?;
    let (resource, rest) = rest.rsplit_once(": token ")?;
    let accepted = rest.strip_suffix(" was already accepted")?.parse().ok()?;
    let offered = if offered == "NULL" {
        None
    } else {
        Some(offered.parse().ok()?)
    };
    // 'resource "name"' for a ledger's resource: the name alone.
    let resource = resource
        .strip_prefix("resource \"")
        .and_then(|named| named.strip_suffix('"'))
        .unwrap_or(resource);
    Some(Stale {
        offered,
        accepted,
        resource: resource.to_owned(),
    })
}

impl From<tokio_postgres::Error> for Error {
    /// The typed error for a driver's error ([`ErrorKind::Other`] when no kind fits).
    fn from(error: tokio_postgres::Error) -> Self {
        let mut typed = match error.as_db_error() {
            Some(db) => {
                let mut typed = Error::new(kind_of(db.code().code()), db.message());
                typed.0.detail = db.detail().map(str::to_owned);
                typed.0.hint = db.hint().map(str::to_owned);
                if typed.0.kind == ErrorKind::StaleToken {
                    typed.0.stale = parse_stale(db.message());
                }
                typed
            }
            // No server error: the connection closed, or the socket failed.
            None if error.is_closed() || error.code().is_none() && is_io(&error) => {
                Error::new(ErrorKind::ConnectionLost, error.to_string())
            }
            None => Error::new(
                error.code().map_or(ErrorKind::Other, |c| kind_of(c.code())),
                error.to_string(),
            ),
        };
        typed.0.sqlstate = error.code().map(|c: &SqlState| c.code().to_owned());
        typed.0.source = Some(error);
        typed
    }
}

/// An I/O failure underneath (a reset, a refused or missing socket, an early end).
fn is_io(error: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    // tokio-postgres' own wording for a connection that ended without an I/O error.
    let text = error.to_string();
    text.contains("connection closed") || text.contains("unexpected EOF")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_messages_parse() {
        let row = "stale fencing token 5 for documents 7: token 10 was already accepted";
        assert_eq!(
            parse_stale(row),
            Some(Stale {
                offered: Some(5),
                accepted: 10,
                resource: "documents 7".into()
            })
        );
        let named = "stale fencing token NULL for resource \"a: b\": token 3 was already accepted";
        assert_eq!(
            parse_stale(named),
            Some(Stale {
                offered: None,
                accepted: 3,
                resource: "a: b".into()
            })
        );
        assert_eq!(parse_stale("something else"), None);
    }
}
