//! Operators' tools: force_release frees a key held by other sessions, by terminating them.

use crate::errors::FencedError;
use crate::locking::key_forms;
use crate::types::LockKey;
use pgrx::pg_sys;
use pgrx::prelude::*;

// Terminates the backend(s) holding the key, the only way to free another session's lock,
// and returns how many. Runs with the caller's rights: it needs what pg_terminate_backend
// needs (superuser, or pg_signal_backend / the holder's role). Refuses the caller's own
// backend.
key_forms! {
    names: ["force_release", "force_release_named", "force_release_named_bigint"],
    rust: [force_release, force_release_named, force_release_named_bigint],
    attributes: [volatile, parallel_unsafe],
    arguments: (),
    returns: i32,
    |fcinfo, _function, keyed| terminate_holders(fcinfo, keyed.key),
}

fn terminate_holders(fcinfo: pg_sys::FunctionCallInfo, key: LockKey) -> i32 {
    let view = crate::extension::qualified(fcinfo, c"fenced_locks");
    let holders: Vec<i32> = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT DISTINCT pid FROM {view} \
                      WHERE ns = $1 AND id = $2 AND granted AND pid IS NOT NULL"
                ),
                None,
                &[key.ns.into(), key.id.into()],
            )?
            .map(|row| row.get::<i32>(1).map(Option::unwrap_or_default))
            .collect::<Result<Vec<_>, _>>()
    })
    .unwrap_or_else(|error: pgrx::spi::Error| panic!("reading pg_locks failed: {error}"));
    if holders.contains(&unsafe { pg_sys::MyProcPid }) {
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
