//! Operators' tools: force_release frees a key held by other sessions, by terminating them.

use crate::errors::FencedError;
use crate::locking::key_of;
use pgrx::prelude::*;

/// Terminates the backend(s) holding (ns, id), the only way to free another session's lock,
/// and returns how many. Runs with the caller's rights: it needs what pg_terminate_backend
/// needs (superuser, or pg_signal_backend / the holder's role). Refuses the caller's own
/// backend.
#[pg_extern(volatile, parallel_unsafe)]
fn force_release(ns: Option<i32>, id: Option<i32>) -> i32 {
    let key = key_of("force_release", ns, id);
    let holders: Vec<i32> = Spi::connect(|client| {
        client
            .select(
                "SELECT DISTINCT pid FROM pg_catalog.pg_locks \
                  WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND pid IS NOT NULL \
                    AND database = (SELECT oid FROM pg_catalog.pg_database \
                                     WHERE datname = pg_catalog.current_database()) \
                    AND classid = $1::pg_catalog.oid AND objid = $2::pg_catalog.oid",
                None,
                &[(key.ns as u32 as i64).into(), (key.id as u32 as i64).into()],
            )?
            .map(|row| row.get::<i32>(1).map(Option::unwrap_or_default))
            .collect::<Result<Vec<_>, _>>()
    })
    .unwrap_or_else(|error: pgrx::spi::Error| panic!("reading pg_locks failed: {error}"));
    if holders.contains(&unsafe { pgrx::pg_sys::MyProcPid }) {
        FencedError::ForceReleaseOwnLock { key }.raise();
    }
    // pg_terminate_backend checks the caller's rights (42501) and, with a timeout, waits for
    // the backend to exit, so the key is free when this returns.
    holders
        .into_iter()
        .filter(|&pid| {
            Spi::get_one_with_args::<bool>(
                "SELECT pg_catalog.pg_terminate_backend($1, 5000)",
                &[pid.into()],
            )
            .ok()
            .flatten()
            .unwrap_or(false)
        })
        .count() as i32
}
