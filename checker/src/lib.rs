//! The checker of fenced_lock's failure experiments: reads the histories that `make compare`
//! and `make ha` write (one JSON line per event; README.md gives the format) and finds every
//! violation of a lock with fencing tokens in them.
//!
//! - `history`: the events, and the operations and commits they pair into.
//! - `checks`: the checks, each a function: porcupine-rs on each key's tokens, and the lock's
//!   rules at the resource.

pub mod checks;
pub mod history;

pub use checks::{check, harmful_events, Kind, Violation};
pub use history::{History, Malformed};

#[cfg(test)]
mod tests;
