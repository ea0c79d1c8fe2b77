//! fenced_lock's settings (GUCs), all in one place.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Flush (and, with synchronous replication, replicate) the WAL behind every token before
/// returning it. Superuser-only: a token issued without it can be issued again after a crash,
/// to any session, so one session's choice would weaken every other session's tokens.
pub static DURABLE_TOKENS: GucSetting<bool> = GucSetting::<bool>::new(true);

pub fn define() {
    GucRegistry::define_bool_guc(
        c"fenced_lock.durable_tokens",
        c"Make every fencing token durable before it is returned.",
        c"When on, the WAL that covers the token sequence's state is flushed, and confirmed by \
          synchronous standbys when synchronous replication is in use, before a token is \
          returned, so that no token is issued twice after a crash or a synchronous failover. \
          Turn off only for efficiency locks, where a repeated token after a crash is harmless.",
        &DURABLE_TOKENS,
        GucContext::Suset,
        GucFlags::default(),
    );
    // Report misspelt fenced_lock.* settings instead of keeping them as placeholders.
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    unsafe {
        pgrx::pg_sys::EmitWarningsOnPlaceholders(c"fenced_lock".as_ptr())
    };
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    unsafe {
        pgrx::pg_sys::MarkGUCPrefixReserved(c"fenced_lock".as_ptr())
    };
}
