//! fenced_lock: PostgreSQL advisory locks that hand out fencing tokens.
//!
//! One module per concern: `locking` talks to the lock manager and holds the
//! transaction-scoped SQL functions, `leases` the session-scoped ones and leader election,
//! `tokens` draws from the extension's sequence, `grants` remembers what this backend holds,
//! `resource` checks tokens where the data lives (fenced_update, enforce_fence, the ledger),
//! `namespaces` names keys (registry, fenced_key), `inspection` serves operators,
//! `shared_grants` publishes live grants in shared memory when preloaded,
//! `extension` finds the extension's own objects, `settings` holds the GUCs, `errors` is the single place where failures become SQLSTATEs.

use pgrx::pg_sys;
use pgrx::prelude::*;

mod compat;
mod errors;
mod extension;
mod grants;
mod inspection;
mod leases;
mod locking;
mod namespaces;
mod resource;
mod settings;
mod shared_grants;
mod tokens;
mod types;

::pgrx::pg_module_magic!(name, version);

pgrx::extension_sql_file!("../sql/bootstrap.sql", bootstrap);
pgrx::extension_sql_file!("../sql/resource.sql", name = "resource");
pgrx::extension_sql_file!("../sql/inspection.sql", name = "inspection");
pgrx::extension_sql_file!("../sql/finalize.sql", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    errors::keep_backtraces_out_of_errors();
    settings::define();
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        shared_grants::install_hooks();
    }
    grants::register_transaction_callbacks();
    extension::register_invalidation_callback();
    resource::register_invalidation_callback();
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
