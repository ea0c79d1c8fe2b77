//! fenced_lock's settings (GUCs), all in one place.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::PostgresGucEnum;

/// What a transaction-scoped acquire does outside a transaction block (autocommit), where its
/// lock ends with the statement.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum OutsideTransaction {
    /// SQLSTATE 25P01: drivers run in autocommit by default and show no warnings, so a
    /// warning would hand out a token whose lock is already gone, unseen.
    #[name = c"error"]
    Error,
    /// A WARNING, and the lock lasts for the statement (0.1.0's behaviour).
    #[name = c"warning"]
    Warning,
}

/// See `OutsideTransaction`; any role may choose (it only concerns its own calls).
static OUTSIDE_TRANSACTION: GucSetting<OutsideTransaction> =
    GucSetting::<OutsideTransaction>::new(OutsideTransaction::Error);

/// fenced_lock.durable_tokens: flush (and replicate) a token's WAL before returning it.
pub fn durable_tokens() -> bool {
    DURABLE_TOKENS.get()
}

/// fenced_lock.max_grants: capacity of the shared grants table, in grants (never negative:
/// the setting's minimum is 0).
pub fn max_grants() -> u32 {
    MAX_GRANTS.get().max(0) as u32
}

/// fenced_lock.token_block: tokens reserved from the sequence in one step for the shared
/// allocator (1: no allocator, every token drawn from the sequence).
pub fn token_block() -> i64 {
    i64::from(TOKEN_BLOCK.get().max(1))
}

/// fenced_lock.failover_skip: how far the sequence moves forward at the first token drawn on
/// a new timeline (0: not at all).
pub fn failover_skip() -> i64 {
    i64::from(FAILOVER_SKIP.get().max(0))
}

/// fenced_lock.lease_lock_delay, in milliseconds (never negative: the minimum is 0).
pub fn lease_lock_delay_ms() -> i64 {
    i64::from(LEASE_LOCK_DELAY.get().max(0))
}

/// fenced_lock.outside_transaction: what a transaction-scoped acquire does in autocommit.
pub fn outside_transaction() -> OutsideTransaction {
    OUTSIDE_TRANSACTION.get()
}

/// fenced_lock.track: count into fenced_lock_stats and fenced_lock_refusals.
pub fn track() -> bool {
    TRACK.get()
}

/// fenced_lock.log_refusals: log refused stale tokens.
pub fn log_refusals() -> bool {
    LOG_REFUSALS.get()
}

/// fenced_lock.log_waits: log lease waits longer than deadlock_timeout.
pub fn log_waits() -> bool {
    LOG_WAITS.get()
}

/// fenced_lock.stats_max_namespaces: (database, namespace) rows fenced_lock_stats keeps.
pub fn stats_max_namespaces() -> u32 {
    STATS_MAX_NAMESPACES.get().max(0) as u32
}

/// fenced_lock.stats_max_tables: (database, table, check) rows fenced_lock_refusals keeps.
pub fn stats_max_tables() -> u32 {
    STATS_MAX_TABLES.get().max(0) as u32
}

static TRACK: GucSetting<bool> = GucSetting::<bool>::new(true);
static LOG_REFUSALS: GucSetting<bool> = GucSetting::<bool>::new(true);
static LOG_WAITS: GucSetting<bool> = GucSetting::<bool>::new(false);
static STATS_MAX_NAMESPACES: GucSetting<i32> = GucSetting::<i32>::new(256);
static STATS_MAX_TABLES: GucSetting<i32> = GucSetting::<i32>::new(256);

/// Flush (and, with synchronous replication, replicate) the WAL behind every token before
/// returning it. Superuser-only: a token issued without it can be issued again after a crash,
/// to any session, so one session's choice would weaken every other session's tokens.
static DURABLE_TOKENS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Capacity of the shared grants table, in grants (only when fenced_lock is preloaded).
static MAX_GRANTS: GucSetting<i32> = GucSetting::<i32>::new(16384);

/// Tokens the shared allocator reserves from the sequence at once (one WAL record, flushed
/// and confirmed by synchronous standbys, per block; the next block is reserved when half of
/// the current one is handed out). A crash leaves a gap of at most twice this many numbers.
/// Only when preloaded; 1 turns the allocator off. Server-wide and fixed at start: backends
/// mixing the allocator and the sequence would hand out tokens out of order.
static TOKEN_BLOCK: GucSetting<i32> = GucSetting::<i32>::new(10_000);

/// How long a lease that expired unreleased stays unavailable to other owners after its
/// expiry (Consul's and Chubby's lock-delay): its holder may still be acting on resources that
/// cannot check a token. Recorded with the lease at each acquire and renew; any role may
/// choose it for the leases it takes.
static LEASE_LOCK_DELAY: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Numbers skipped at the first token drawn on a new timeline (after a promotion or a
/// point-in-time recovery), so that no token the old primary handed out after the last WAL
/// this server received is issued again. It must exceed the tokens issued during the worst
/// replication lag.
static FAILOVER_SKIP: GucSetting<i32> = GucSetting::<i32>::new(1_000_000_000);

/// Read by CREATE EXTENSION from the database's settings (bootstrap.sql), never by the library:
/// defined so that the reserved prefix accepts it.
static TOKEN_FLOOR: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(None);

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
    // Superuser-only, as pg_stat_statements.track and log_lock_waits are: the counters and the
    // log are the operator's, and a role turning them off would hide its own refusals.
    GucRegistry::define_bool_guc(
        c"fenced_lock.track",
        c"Count acquisitions, waits, leases and refusals in fenced_lock_stats and \
          fenced_lock_refusals.",
        c"Needs fenced_lock in shared_preload_libraries. Each backend counts in its own memory \
          and adds its counts to the shared ones when a transaction ends.",
        &TRACK,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"fenced_lock.log_refusals",
        c"Log each stale fencing token refused, at most once a second per table and check.",
        c"One LOG line names the check, the table (and the row's key where known), both tokens, \
          and how many refusals of that table and check were not logged since the last line.",
        &LOG_REFUSALS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"fenced_lock.log_waits",
        c"Log a lease wait that lasts longer than deadlock_timeout, and who holds the lease.",
        c"Like log_lock_waits for the lease functions: a LOG line once the wait passes \
          deadlock_timeout, and another when the lease is granted.",
        &LOG_WAITS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"fenced_lock.outside_transaction",
        c"What a transaction-scoped acquire does outside a transaction block: error or warning.",
        c"error (the default) raises SQLSTATE 25P01, since the lock would end with the \
          statement; warning takes the statement-long lock and warns.",
        &OUTSIDE_TRANSACTION,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"fenced_lock.lease_lock_delay",
        c"How long a lease that expired without a release stays unavailable to other owners.",
        c"Recorded with a lease when it is acquired or renewed. After such a lease expires \
          unreleased, another owner can take it only once this delay has passed as well (a \
          waiting acquire_lease sleeps until then); release_lease frees it at once. 0 (the \
          default): no delay; at most 1 day.",
        &LEASE_LOCK_DELAY,
        0,
        // A day: with the TTL's maximum (leases/mod.rs), no expiry and delay a lease call
        // writes add up past the end of time.
        86_400_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_string_guc(
        c"fenced_lock.token_floor",
        c"The token a new installation of fenced_lock in this database starts above.",
        c"DROP EXTENSION fenced_lock records the last token it issued here as this \
          database's setting (ALTER DATABASE ... SET), and CREATE EXTENSION starts above it \
          and above the clock, so that a re-created extension never issues a token an earlier \
          one did, whatever the clock said. A superuser may raise it by hand.",
        &TOKEN_FLOOR,
        GucContext::Suset,
        GucFlags::default(),
    );
    // A postmaster-level setting can only be created while the postmaster loads the library;
    // loaded later (not preloaded), there is no grants table for it to size anyway.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        GucRegistry::define_int_guc(
            c"fenced_lock.max_grants",
            c"Live fenced grants the shared grants table can show (needs preloading).",
            c"The fenced_locks view shows token, scope and acquired_at for up to this many \
              grants at once; beyond it, acquisition still succeeds and the view shows those \
              columns as NULL. Each entry takes 176 bytes of shared memory.",
            &MAX_GRANTS,
            0,
            10_000_000,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"fenced_lock.token_block",
            c"Tokens the shared allocator reserves from the sequence at once (needs preloading).",
            c"Each block costs one WAL record, flushed (and confirmed by synchronous standbys) \
              before its first token is returned; the tokens in it cost an atomic increment. The \
              next block is reserved when half of the current one is handed out. A crash \
              leaves a gap of at most twice this many numbers. 1 turns the allocator off.",
            &TOKEN_BLOCK,
            1,
            1_000_000,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"fenced_lock.stats_max_namespaces",
            c"(database, namespace) rows fenced_lock_stats keeps (needs preloading).",
            c"One database takes at most half of them. A namespace counted beyond them is \
              counted in one row whose database and namespace are NULL. A reset frees every \
              row, dropping a database its rows; each takes 200 bytes.",
            &STATS_MAX_NAMESPACES,
            1,
            1_000_000,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"fenced_lock.stats_max_tables",
            c"(database, table, check) rows fenced_lock_refusals keeps (needs preloading).",
            c"One database takes at most half of them. A table counted beyond them is counted \
              in one row whose database and table are NULL. A reset frees every row, dropping a \
              table or database its rows; each takes 200 bytes.",
            &STATS_MAX_TABLES,
            1,
            1_000_000,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"fenced_lock.failover_skip",
        c"Numbers the token sequence skips at the first token on a new timeline.",
        c"After a promotion (or a point-in-time recovery) the old primary may have handed out \
          tokens this server never received. The first token drawn on the new timeline moves \
          the sequence this far forward first. 0 turns it off.",
        &FAILOVER_SKIP,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // Report misspelt fenced_lock.* settings instead of keeping them as placeholders.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"fenced_lock".as_ptr()) };
}
