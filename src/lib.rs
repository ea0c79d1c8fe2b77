//! fenced_lock: PostgreSQL advisory locks that hand out fencing tokens.
//!
//! The project's one description of its layout (the README links here).
//!
//! Modules, each depending only on those listed before it (no import cycle):
//! - `types`: the key, the scope, argument checks; imports nothing from the crate.
//! - `unguarded`: PostgreSQL's read-only leaf functions bound without pgrx's per-call guard,
//!   and one guard for a group of calls; imports nothing from the crate.
//! - `compat`: the differences between PostgreSQL 15, 16 and 18.
//! - `settings`: the GUCs, behind typed accessors.
//! - `errors`: every failure and its SQLSTATE, message, DETAIL and HINT; raw errors for codes
//!   pgrx cannot carry (SF001, codes raised under fenced_update).
//! - `shmem`: the shared-memory hooks (when preloaded) and a guard for LWLocks.
//! - `wakeups`: the wake-up channels (condition variables in shared memory, when preloaded)
//!   that waiting lease and permit acquires sleep on, and the sleep itself.
//! - `spi`: saved SPI plans, for the statements fenced_lock runs on its own tables.
//! - `stats`: the cumulative counters (fenced_lock_stats, fenced_lock_refusals) in shared
//!   memory (when preloaded), their file across a clean restart, and the refusal log.
//! - `extension`: the extension's own objects (token sequence, registry), found in its schema.
//! - `shared_grants`: the shared-memory table of live grants (when preloaded).
//! - `grants`: what this backend holds, with transaction and subtransaction callbacks.
//! - `allocator`: the shared token allocator's blocks (when preloaded).
//! - `tokens`: drawing a token (from a block, or from the sequence), durable and replicated;
//!   the skip on a new timeline; moving the sequence past a resource's highest token.
//! - `namespaces`: the registry and `fenced_key`.
//! - `locking`: the lock manager, the key forms of every key-taking function (`key_forms!`:
//!   `F` and `F_named`, the Rust names the SQL names), and the transaction-scoped functions.
//! - `permits`: fenced counting semaphores (a slot and a token per holder), waits in line.
//! - `key_sets`: many keys in one call (`acquire_fenced_all`), in ascending order, one token.
//! - `session`: the session-scoped functions, with owners: leader election.
//! - `leases`: table-backed leases (owner, TTL on the database clock) for pooled clients: the
//!   functions, their rules and their waits (`leases/mod.rs`; the wake-ups are `wakeups`), and
//!   the table's direct reads, writes and sweep with the invariants they keep
//!   (`leases/storage.rs`).
//! - `inspection`: the rows of `fenced_locks`, and `force_release`.
//! - `resource`: where tokens are checked: `fenced_update`, `enforce_fence`, the ledger.
//! - `released`: the C symbols of earlier releases' SQL that 1.0 dropped, each raising 55000
//!   until `ALTER EXTENSION fenced_lock UPDATE`.
//!
//! Beside `src/`: `sql/` (hand-written SQL; 0.1.0's install script as shipped; the upgrade
//! scripts), `pg_test/` (pg_regress in `sql/` + `expected/`, isolation `specs/`, and the
//! `collation/`, `standby/`, `upgrade/`, `drivers/` and `monitoring/` suites), `contrib/` (the
//! Prometheus exporter's queries file), `faults/` (the fault suite, a
//! crate of its own), `checker/` (the history checker of `make compare` and `make ha`, a
//! crate of its own), `ha/` (the Patroni + etcd suite, `make ha`), `compare/` (Redis, Redlock,
//! etcd and PostgreSQL by hand through the same faults, `make compare`), `bench/` (pgbench
//! scripts), `examples/` (a leader loop), `scripts/` (setup, servers, the test and bench
//! drivers, the real parts the HA suite and the comparison share).

use pgrx::pg_sys;
use pgrx::prelude::*;

mod allocator;
mod compat;
mod errors;
mod extension;
mod grants;
mod inspection;
mod key_sets;
mod leases;
mod locking;
mod namespaces;
mod permits;
mod released;
mod resource;
mod session;
mod settings;
mod shared_grants;
mod shmem;
mod spi;
mod stats;
mod tokens;
mod types;
mod unguarded;
mod wakeups;

::pgrx::pg_module_magic!(name, version);

pgrx::extension_sql_file!("../sql/bootstrap.sql", bootstrap);
pgrx::extension_sql_file!("../sql/resource.sql", name = "resource");
pgrx::extension_sql_file!("../sql/inspection.sql", name = "inspection");
pgrx::extension_sql_file!("../sql/leases.sql", name = "leases");
pgrx::extension_sql_file!("../sql/finalize.sql", finalize);

/// The schema of the functions behind the views (`schema = "fenced_lock_internal"` on each):
/// not the API, which is the extension's own schema (docs/api.md).
#[pg_schema]
mod fenced_lock_internal {}

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    errors::keep_backtraces_out_of_errors();
    settings::define();
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        shmem::install_hooks(&[
            shared_grants::GRANTS_PART,
            wakeups::WAKEUPS_PART,
            allocator::BLOCKS_PART,
            stats::STATS_PART,
        ]);
    }
    grants::register_transaction_callbacks();
    leases::register_callbacks();
    wakeups::register_callbacks();
    stats::register_callback();
    extension::register_invalidation_callback();
    resource::register_invalidation_callbacks();
}

#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'fenced_lock'"]
    }
}
