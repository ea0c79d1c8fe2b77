//! Table-backed leases: a key held by an owner (a client-chosen id) until a TTL on the
//! database's clock runs out, in `fenced_lease_state`. Every call is one statement that
//! commits with its transaction and ties nothing to the server session, so leases work through
//! transaction-mode poolers and serverless drivers, where session locks pass from client to
//! client. A new holder gets a new token from the same sequence as every other grant; an
//! expired lease is taken over by the next acquire (no background worker). Leases and advisory
//! locks are separate key spaces.
//!
//! The table is readable by all and written only here, straight to its heap and indexes, with
//! no SQL and no table rights of the caller (whose role is recorded: only it, or a member,
//! renews or releases). Waiting acquires line up on a lock of the key's own (the lock manager
//! grants it in arrival order); the head of the line sleeps on a condition variable that
//! releases broadcast (when preloaded), or until the holder's expiry, and a call that does not
//! wait takes no free lease while anyone is in line.

mod storage;

use crate::errors::{refuse_in_parallel_mode, FencedError, OrRaise};
use crate::locking::permit_argument;
use crate::locking::{key_forms, try_lock_exclusive, wait_argument, Wait};
use crate::stats::{self, Count};
use crate::types::{required, LockKey, MAX_PERMITS};
use crate::unguarded;
use crate::wakeups;
use crate::{settings, tokens};
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::prelude::*;
use storage::{
    find, insert_first_lease, rows_of, saturating_plus, superseded, sweep_now_and_then, update_row,
    with_lease_table, Change, LeaseRow, LeaseTable, Rewrite, RowWrite, Unseen, Which,
};

/// A waiting acquire looks again at least this often (ms) even when preloaded: a release
/// committed by COMMIT PREPARED, in another session, broadcasts nothing.
const RECHECK_MS: i64 = 1000;

/// A waiting acquire that found the lease row locked by another open transaction (which is
/// taking, renewing or releasing it) looks again this often (ms): row locks are not waited
/// for, so that no acquire waits past its `wait`.
const ROW_LOCKED_RECHECK_MS: i64 = 10;

/// The longest key text a lease keeps (bytes); owners are bounded by `locking::owner_argument`.
const MAX_KEY_BYTES: usize = crate::locking::MAX_IDENTIFIER_BYTES;

/// The longest TTL a lease takes (as interval comparison counts: a month is 30 days, so
/// '1 year' is within). With the lock-delay's maximum (a day, settings.rs), no expiry and
/// delay a call writes add up past the end of time.
const MAX_TTL_DAYS: i128 = 366;

pub fn register_callbacks() {
    storage::register_callbacks();
}

/// A lease's TTL: positive and at most MAX_TTL_DAYS (22023 otherwise).
fn lease_ttl(ttl: Option<Interval>, function: &'static str) -> Interval {
    let ttl = required(ttl, function, "ttl").or_raise();
    let refuse = |message: String, hint| FencedError::InvalidArgument { message, hint }.raise();
    if ttl.as_micros() <= 0 {
        refuse(format!("{function}: \"ttl\" must be positive"), None);
    }
    if ttl.as_micros() > MAX_TTL_DAYS * 86_400_000_000 {
        refuse(
            format!("{function}: \"ttl\" must be at most {MAX_TTL_DAYS} days"),
            Some("A holder renews its lease well within its TTL; renew_lease extends it."),
        );
    }
    ttl
}

/// The lock-delay recorded with a lease this session acquires or renews
/// (fenced_lock.lease_lock_delay).
fn lock_delay() -> Interval {
    Interval::from_micros(settings::lease_lock_delay_ms() * 1000)
}

/// The lease's state before an acquire, seen by one look.
enum Seen {
    /// Taken (new token) or extended (same token): the slot (0 for the key's lease) and token.
    Granted { slot: u16, token: i64 },
    /// Held by another owner until this many microseconds from now; `holder` (owner and
    /// token) when a row was read, and whether it expired but its lock-delay has not passed.
    Held {
        expires_in_us: i64,
        holder: Option<(String, i64)>,
        delayed: bool,
    },
}

impl Seen {
    /// Being written by another open transaction: look again soon.
    const BUSY: Seen = Seen::Held {
        expires_in_us: 0,
        holder: None,
        delayed: false,
    };

    /// `row`, held by another owner, as seen `now`. Only a waiting acquire needs to know until
    /// when (0 or less: look again soon).
    fn held(row: LeaseRow, now: pg_sys::TimestampTz, waiting: bool) -> Seen {
        let expires_in_us = match waiting {
            true => row.available_at.map_or(0, |at| at - now),
            false => 0,
        };
        Seen::Held {
            expires_in_us,
            holder: row.owner.map(|owner| (owner, row.token)),
            delayed: row.expires_at.is_some_and(|at| at <= now),
        }
    }

    /// Of two looks at slots held by others, what a waiter needs: the sooner availability, a
    /// holder to name, whether either was delayed.
    fn sooner(self, other: Seen) -> Seen {
        match (self, other) {
            (
                Seen::Held {
                    expires_in_us: a,
                    holder,
                    delayed: delayed_a,
                },
                Seen::Held {
                    expires_in_us: b,
                    holder: other_holder,
                    delayed: delayed_b,
                },
            ) => Seen::Held {
                expires_in_us: a.min(b),
                holder: holder.or(other_holder),
                delayed: delayed_a || delayed_b,
            },
            (granted @ Seen::Granted { .. }, _) | (_, granted) => granted,
        }
    }
}

/// What an acquire did to the lease, for fenced_lock_stats.
#[derive(Clone, Copy)]
enum Granted {
    /// This owner's lease, extended.
    Renewed,
    /// Free, released or this owner's after expiry: a new token.
    Acquired,
    /// Another owner's after its expiry (and lock-delay): a new token.
    TakenOver,
}

impl Granted {
    fn count(self, key: LockKey) {
        let counts: &[Count] = match self {
            Granted::Renewed => &[Count::LeasesRenewed],
            Granted::Acquired => &[Count::LeasesAcquired, Count::TokensIssued],
            Granted::TakenOver => &[
                Count::LeasesAcquired,
                Count::LeasesTakenOver,
                Count::TokensIssued,
            ],
        };
        counts.iter().for_each(|&count| stats::one(key, count));
    }
}

/// An acquire as its SQL function was called, its arguments checked.
struct Acquire<'a> {
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: crate::locking::Keyed,
    owner: &'a str,
    ttl: Interval,
    /// Whether the acquire waits (then it needs to know until when a lease is held): it looks
    /// only at the head of the key's line.
    waiting: bool,
    /// A permit of the key's lease semaphore of this many permits; None: the key's lease.
    permits: Option<u16>,
    /// The lock the key's waiting acquires line up on (`LockKey::lease_line_tag`).
    line: pg_sys::LOCKTAG,
}

/// One look: the key's lease, or a permit of it.
fn look(lease: &LeaseTable, acquire: &Acquire, role: pg_sys::Oid) -> Seen {
    match acquire.permits {
        None => attempt(lease, acquire, role, 0),
        Some(permits) => attempt_permits(lease, acquire, role, permits),
    }
}

/// One look at a lease semaphore: the owner's own permit (extended, or a new token after its
/// expiry) within `permits`, or above it while it lasts (a count lowered since: its holder
/// keeps it until it ends, and never gets it back after); else the lowest slot within
/// `permits` that is free, released or available after its holder's expiry.
fn attempt_permits(lease: &LeaseTable, acquire: &Acquire, role: pg_sys::Oid, permits: u16) -> Seen {
    let rows = rows_of(lease, acquire.keyed.key);
    let now = unguarded::now();
    let own = |row: &LeaseRow| {
        row.owner.as_deref() == Some(acquire.owner)
            && row.held_for(role)
            && (row.slot <= permits || row.expires_at.is_some_and(|at| at > now))
    };
    if let Some(row) = rows.iter().find(|row| row.slot >= 1 && own(row)) {
        return attempt(lease, acquire, role, row.slot);
    }
    let mut by_slot: Vec<Option<LeaseRow>> = (0..=permits).map(|_| None).collect();
    for row in rows
        .into_iter()
        .filter(|row| (1..=permits).contains(&row.slot))
    {
        let slot = usize::from(row.slot);
        by_slot[slot] = Some(row);
    }
    let mut seen: Option<Seen> = None;
    for slot in 1..=permits {
        // A slot held by another owner until later is not looked at again.
        let this = match by_slot[usize::from(slot)].take() {
            Some(row) if row.owner.is_some() && row.available_at.is_none_or(|at| at > now) => {
                refuse_superseded(lease, acquire.function, acquire.keyed.key, &row);
                Seen::held(row, now, acquire.waiting)
            }
            _ => attempt(lease, acquire, role, slot),
        };
        if let Seen::Granted { .. } = this {
            return this;
        }
        seen = Some(match seen {
            Some(seen) => seen.sooner(this),
            None => this,
        });
    }
    seen.expect("at least one permit")
}

/// One attempt at slot `slot` of the key (0: its lease): the lease if it is free, expired, or
/// held by the acquire's owner (and the caller's role, `role`).
fn attempt(lease: &LeaseTable, acquire: &Acquire, role: pg_sys::Oid, slot: u16) -> Seen {
    let Acquire {
        fcinfo,
        function,
        ref keyed,
        owner,
        ttl,
        waiting,
        permits,
        ref line,
    } = *acquire;
    // A slot above a lowered count is only ever extended, never granted anew.
    let grantable_slot = permits.is_none_or(|permits| slot <= permits);
    let columns = &lease.columns;
    let (ttl, delay) = (ttl.into_datum(), lock_delay().into_datum());
    // The columns a new holder writes, the key's own aside.
    let new_holder = |token: i64| {
        let (mut changes, _) = renewal(columns, ttl, delay);
        // Acquired when renewed: the renewal's own reading of the clock.
        let acquired_at = changes[0].1;
        changes.extend([
            (columns.owner, owner.into_datum()),
            (columns.holder, role.into_datum()),
            (columns.token, token.into_datum()),
            (columns.key, keyed.label.as_deref().into_datum()),
            (columns.acquired_at, acquired_at),
        ]);
        changes
    };
    loop {
        let now = unguarded::now();
        let this_owners =
            |row: &LeaseRow| row.owner.as_deref() == Some(owner) && row.held_for(role);
        let granted = |row: &LeaseRow| {
            // Still held by this owner: the same token, the TTL extended.
            if this_owners(row) && row.expires_at.is_some_and(|at| at > now) {
                return Some((
                    Rewrite::Set(renewal(columns, ttl, delay).0),
                    (row.token, Granted::Renewed),
                ));
            }
            // Free, expired, or this owner's after expiry: a new grant. Its token is drawn
            // after the look, which saw the last holder's write committed, so it is above every
            // earlier holder's; a write that then finds the row busy leaves it unused, as a
            // rolled-back grant does.
            // A call that does not wait takes no lease from under the head of the key's line.
            let takeable = (row.owner.is_none()
                || this_owners(row)
                || row.available_at.is_some_and(|at| at <= now))
                && (waiting || line_is_empty(line))
                && grantable_slot;
            let granted = match row.owner.is_some() && !this_owners(row) {
                true => Granted::TakenOver,
                false => Granted::Acquired,
            };
            takeable.then(|| {
                let token = tokens::next_token(fcinfo);
                (Rewrite::Set(new_holder(token)), (token, granted))
            })
        };
        match write_found(lease, function, keyed.key, Which::Slot(slot), granted) {
            Found::Written((token, granted)) => {
                granted.count(keyed.key);
                return Seen::Granted { slot, token };
            }
            // Held by another owner (until its expiry and lock-delay).
            Found::Refused(row) => return Seen::held(row, now, waiting),
            // Locked by another open transaction: look again soon.
            Found::Busy => return Seen::BUSY,
            Found::Absent => {}
        }
        // No row: the key was never leased, or its row was swept. A first lease being written
        // by another open transaction holds the key's first-lease lock until it ends: busy.
        // So is a key with waiters in line, to a call that does not wait.
        if !grantable_slot
            || !(waiting || line_is_empty(line))
            || !lock_first_lease(keyed.key, slot)
        {
            return Seen::BUSY;
        }
        // With that lock, nobody else writes the key's first lease through these functions.
        // Tokens only rise: one drawn now is above every earlier holder's, swept rows' too; a
        // row the insertion then finds leaves it unused, as a rolled-back grant does.
        let token = tokens::next_token(fcinfo);
        let mut row = new_holder(token);
        row.extend([
            (columns.ns, keyed.key.ns.into_datum()),
            (columns.id, keyed.key.id.into_datum()),
        ]);
        row.extend(
            columns
                .slot
                .map(|column| (column, i32::from(slot).into_datum())),
        );
        let unseen = match insert_first_lease(lease, (keyed.key, slot), &row) {
            Ok(()) => {
                sweep_now_and_then(lease);
                Granted::Acquired.count(keyed.key);
                return Seen::Granted { slot, token };
            }
            Err(unseen) => unseen,
        };
        // The key has a row the look did not see, so the lock was for a write that did not
        // happen: it is let go, so that it never stands in the way of the key's next first
        // lease. A row another open transaction is writing without the lock (the owner's own
        // INSERT, a restore) is busy until it ends: no look sees it sooner. One committed
        // after the look's snapshot is looked at again with a newer one, or under one snapshot
        // throughout is 40001 (where INSERT ... ON CONFLICT DO NOTHING would raise it too).
        // One gone since the insertion met it (its insertion taken back) is looked for again.
        unlock_first_lease(keyed.key, slot);
        match unseen {
            Unseen::InProgress => return Seen::BUSY,
            Unseen::Committed if transaction_snapshot() => FencedError::LeaseChangedAfterSnapshot {
                function,
                key: keyed.key,
            }
            .raise(),
            Unseen::Committed | Unseen::Nothing => {
                pgrx::check_for_interrupts!();
            }
        }
    }
}

/// The columns a renewal writes: renewed now, expiring `ttl` after it (also returned), with
/// the session's lock-delay. A new holder's row writes them too.
fn renewal(
    columns: &storage::Columns,
    ttl: Option<pg_sys::Datum>,
    delay: Option<pg_sys::Datum>,
) -> (Vec<Change>, pg_sys::TimestampTz) {
    let now = unguarded::now();
    let expires_at = saturating_plus(now, ttl.expect("a TTL"));
    let mut changes = vec![
        (columns.renewed_at, now.into_datum()),
        (columns.expires_at, expires_at.into_datum()),
    ];
    changes.extend(columns.lock_delay.map(|column| (column, delay)));
    (changes, expires_at)
}

/// Writes what `change` gives to the row of the key's lease (or of a permit of it) held with
/// `token` by `role` (or a role it is a member of), as `write_found` does: what `change`
/// returned with its changes, or None when no lease is held with that token. Never waits
/// (55P03: the caller must hear that it could not write).
fn write_held<T>(
    lease: &LeaseTable,
    function: &'static str,
    (key, token, role): (LockKey, i64, pg_sys::Oid),
    mut change: impl FnMut() -> (Rewrite, T),
) -> Option<T> {
    let held = |row: &LeaseRow| row.token == token && row.owner.is_some() && row.held_for(role);
    let which = Which::Token(token);
    match write_found(lease, function, key, which, |row| {
        held(row).then(&mut change)
    }) {
        Found::Written(result) => Some(result),
        Found::Busy => FencedError::LeaseRowBusy { function, key }.raise(),
        Found::Absent | Found::Refused(_) => None,
    }
}

/// What `write_found` found and did.
enum Found<T> {
    /// The key has no row.
    Absent,
    /// A row `change` left as it was.
    Refused(LeaseRow),
    /// A row `change` would write, which another open transaction has locked or is changing.
    Busy,
    /// A row written: what `change` returned with its changes.
    Written(T),
}

/// Finds the row of `key` that `which` names and writes what `change` makes of it as seen
/// (`update_row`: that version only, without waiting), so that a caller that only looks never
/// stands in the holder's way. A row changed after the look's snapshot is looked at again with
/// a newer one, unless the transaction reads one snapshot throughout: then 40001 (a look again
/// would see the same row).
fn write_found<T>(
    lease: &LeaseTable,
    function: &'static str,
    key: LockKey,
    which: Which,
    mut change: impl FnMut(&LeaseRow) -> Option<(Rewrite, T)>,
) -> Found<T> {
    loop {
        let Some(row) = find(lease, key, which) else {
            return Found::Absent;
        };
        let Some((rewrite, result)) = change(&row) else {
            refuse_superseded(lease, function, key, &row);
            return Found::Refused(row);
        };
        match update_row(lease, &row, &rewrite) {
            RowWrite::Written => return Found::Written(result),
            RowWrite::Busy => return Found::Busy,
            RowWrite::Changed if transaction_snapshot() => {
                FencedError::LeaseChangedAfterSnapshot { function, key }.raise()
            }
            RowWrite::Changed => {}
        }
        pgrx::check_for_interrupts!();
    }
}

/// A lease held by another owner as the transaction's snapshot shows it, but released, taken
/// over or renewed since by a transaction that committed after that snapshot: under
/// REPEATABLE READ or SERIALIZABLE this transaction can never see the key as it is, so 40001
/// at once (never NULL, read as busy, nor a wait that holds the key's line).
fn refuse_superseded(lease: &LeaseTable, function: &'static str, key: LockKey, row: &LeaseRow) {
    if transaction_snapshot() && superseded(lease, key, row) {
        FencedError::LeaseChangedAfterSnapshot { function, key }.raise();
    }
}

/// A read-only transaction (a hot standby's too) writes no lease: 25006 before looking, as
/// PostgreSQL refuses an UPDATE before it finds a row, so that no answer depends on what a
/// look found (a lease held by another owner would read as busy, one lost as lost).
fn refuse_read_only(function: &'static str) {
    if unsafe { pg_sys::XactReadOnly } {
        FencedError::ReadOnlyLease { function }.raise();
    }
}

/// Whether the transaction reads one snapshot throughout (REPEATABLE READ or SERIALIZABLE):
/// then a statement run again sees the same rows.
fn transaction_snapshot() -> bool {
    unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 }
}

/// The transaction-level lock that orders the first leases of `key`'s `slot` (0: the key's
/// lease), taken without waiting: false when another open transaction is writing that first
/// lease.
fn lock_first_lease(key: LockKey, slot: u16) -> bool {
    try_lock_exclusive(&first_lease_tag(key, slot), false)
}

/// Lets go of the hold `lock_first_lease` took (one of this transaction's holds, if it had
/// taken the lock before).
fn unlock_first_lease(key: LockKey, slot: u16) {
    let tag = first_lease_tag(key, slot);
    unsafe { pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as _, false) };
}

/// The key's lease: an advisory lock tag of its own (objsubid 3 in pg_locks); a permit's: a
/// user lock above every permit slot and below the permit line (types::LockKey::permit_tag).
fn first_lease_tag(key: LockKey, slot: u16) -> pg_sys::LOCKTAG {
    match slot {
        0 => pg_sys::LOCKTAG {
            locktag_field4: 3,
            ..key.locktag()
        },
        slot => key.permit_tag(MAX_PERMITS as u16 + slot),
    }
}

/// One acquire's wait, as fenced_lock_stats and the log see it: a lease refused by its
/// lock-delay is counted once per call; with fenced_lock.log_waits, a wait longer than
/// deadlock_timeout is logged with the holder, and so is its end.
struct LeaseWait {
    key: LockKey,
    started: pg_sys::TimestampTz,
    delayed: bool,
    logged: bool,
    /// The owner last seen holding the lease: what a wait that runs out names.
    holder: Option<String>,
    /// A lease semaphore's permits (None: the key's lease).
    permits: Option<u16>,
}

impl LeaseWait {
    fn new(key: LockKey, permits: Option<u16>) -> LeaseWait {
        LeaseWait {
            key,
            started: unguarded::now(),
            delayed: false,
            logged: false,
            holder: None,
            permits,
        }
    }

    fn waited_ms(&self) -> f64 {
        (unguarded::now() - self.started) as f64 / 1000.0
    }

    fn held(&mut self, holder: Option<(String, i64)>, delayed: bool) {
        if let Some((owner, _)) = &holder {
            self.holder = Some(owner.clone());
        }
        if delayed && !self.delayed {
            self.delayed = true;
            stats::one(self.key, Count::LeasesDelayed);
        }
        let due = self.waited_ms() >= f64::from(unsafe { pg_sys::DeadlockTimeout });
        if self.logged || !due || !settings::log_waits() {
            return;
        }
        self.logged = true;
        let holder = match holder {
            Some((owner, token)) => format!("held by owner \"{owner}\" with token {token}"),
            None => "being written by another transaction".into(),
        };
        self.log(&format!("still waiting for lease {} {holder}", self.key));
    }

    fn granted(&self) {
        if self.logged {
            self.log(&format!("acquired lease {}", self.key));
        }
    }

    /// The wait ran out (its own timeout, or lock_timeout): 55P03 naming the key and the
    /// holder last seen.
    fn ran_out(&self, timeout_ms: i32, lock_timeout: bool) -> ! {
        if self.logged {
            self.log(&format!("gave up waiting for lease {}", self.key));
        }
        stats::waited(self.key, self.started);
        stats::one(
            self.key,
            if lock_timeout {
                Count::LockTimeouts
            } else {
                Count::Timeouts
            },
        );
        FencedError::LeaseNotAcquired {
            key: self.key,
            timeout_ms,
            lock_timeout,
            holder: self.holder.clone(),
            permits: self.permits,
        }
        .raise()
    }

    fn log(&self, what: &str) {
        let pid = unsafe { pg_sys::MyProcPid };
        pgrx::log!(
            "fenced_lock: process {pid} {what} after {:.3} ms",
            self.waited_ms()
        );
    }
}

/// Acquires the lease (with `permits`: a permit of it), waiting as `wait` says: the slot (0
/// for the lease) and token; None only for `Wait::Never` (busy). A wait that runs out raises
/// 55P03.
fn acquire(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
    keyed: crate::locking::Keyed,
    (owner, ttl, permits): (Option<&str>, Option<Interval>, Option<u16>),
    wait: Wait,
) -> Option<(u16, i64)> {
    let owner = crate::locking::owner_argument(owner, function);
    if keyed
        .label
        .as_ref()
        .is_some_and(|key| key.len() > MAX_KEY_BYTES)
    {
        FencedError::ValueTooLong {
            function,
            argument: "key",
            limit: MAX_KEY_BYTES,
        }
        .raise();
    }
    let ttl = lease_ttl(ttl, function);
    crate::locking::refuse_on_hot_standby();
    refuse_read_only(function);
    refuse_in_parallel_mode(function);
    let now = unguarded::now;
    // The bound of a wait: its own timeout, else lock_timeout (as a lock wait's), else none.
    let lock_timeout_ms = unsafe { pg_sys::LockTimeout };
    let (bound_ms, lock_timeout) = match wait {
        Wait::Never => (None, false),
        Wait::AtMost { millis, .. } => (Some(millis), false),
        Wait::Unbounded if lock_timeout_ms > 0 => (Some(lock_timeout_ms), true),
        Wait::Unbounded => (None, true),
    };
    let deadline = match wait {
        Wait::Never => None,
        _ => Some(bound_ms.map_or(i64::MAX, |ms| now().saturating_add(i64::from(ms) * 1000))),
    };
    let channel = wakeups::channel(keyed.key);
    let line = keyed.key.lease_line_tag(permits.is_some());
    let call = Acquire {
        fcinfo,
        function,
        keyed,
        owner,
        ttl,
        waiting: deadline.is_some(),
        permits,
        line,
    };
    let mut lease_wait = LeaseWait::new(call.keyed.key, permits);
    // A waiting acquire first takes its place in the key's line and looks only at its head,
    // so that waiters are granted in arrival order; it leaves the line once it has the lease
    // or gives up (an error leaves it with the rest of the transaction's locks).
    if let Some(deadline) = deadline {
        let line_wait = match bound_ms {
            Some(_) => {
                let millis = ((deadline - now()).max(0) + 999) / 1000;
                let millis = millis.min(i64::from(i32::MAX)) as i32;
                Wait::AtMost { millis, of: millis }
            }
            None => Wait::Unbounded,
        };
        if !join_line(call.keyed.key, &call.line, line_wait) {
            lease_wait.ran_out(bound_ms.unwrap_or_default(), lock_timeout);
        }
    }
    let leave_line = || {
        if deadline.is_some() {
            unsafe { pg_sys::LockRelease(&call.line, pg_sys::ExclusiveLock as _, false) };
        }
    };
    loop {
        // Prepared before looking, so a release between the look and the sleep still wakes
        // this backend.
        if let (Some(channel), Some(_)) = (channel, deadline) {
            unsafe { pg_sys::ConditionVariablePrepareToSleep(channel) };
        }
        let seen = with_lease_table(fcinfo, |lease, role| look(lease, &call, role));
        let expires_in_us = match seen {
            Seen::Granted { slot, token } => {
                if channel.is_some() && deadline.is_some() {
                    unsafe { pg_sys::ConditionVariableCancelSleep() };
                }
                leave_line();
                lease_wait.granted();
                return Some((slot, token));
            }
            Seen::Held {
                expires_in_us,
                holder,
                delayed,
            } => {
                lease_wait.held(holder, delayed);
                expires_in_us
            }
        };
        // A call that does not wait: busy.
        let deadline = deadline?;
        let left_us = deadline - now();
        if left_us <= 0 {
            if channel.is_some() {
                unsafe { pg_sys::ConditionVariableCancelSleep() };
            }
            leave_line();
            lease_wait.ran_out(bound_ms.unwrap_or_default(), lock_timeout);
        }
        // Until the holder's expiry (then the lease can be taken over), the deadline or
        // RECHECK_MS, whichever is first; a release wakes the sleeper earlier. A row locked by
        // another open transaction is looked at again soon.
        let until_expiry_ms = match expires_in_us {
            1.. => (expires_in_us + 999) / 1000,
            _ => ROW_LOCKED_RECHECK_MS,
        };
        let sleep_ms = (left_us.saturating_add(999) / 1000)
            .min(until_expiry_ms)
            .min(RECHECK_MS);
        wakeups::sleep(channel, sleep_ms, crate::compat::lease_wait_event());
    }
}

/// Takes a place in the line of `key`'s waiting lease acquires, `line`, and waits as `wait`
/// says to reach its head: false when a bounded wait ran out first.
fn join_line(key: LockKey, line: &pg_sys::LOCKTAG, wait: Wait) -> bool {
    try_lock_exclusive(line, false) || crate::locking::wait_in_line(key, line, wait)
}

/// Whether nobody waits in `line` (then a call that does not wait may take a free lease): a
/// waiting acquire at its head is first in line for it.
fn line_is_empty(line: &pg_sys::LOCKTAG) -> bool {
    let free = try_lock_exclusive(line, false);
    if free {
        unsafe { pg_sys::LockRelease(line, pg_sys::ExclusiveLock as _, false) };
    }
    free
}

// The lease on the key for `owner`, for `ttl` on the database's clock: its token once the
// key is free, expired, or already held by this owner (then the same token, the TTL
// extended), waiting in arrival order for a release or the holder's expiry (55P03 when
// `timeout`, or lock_timeout, runs out). A new holder gets a new token, larger than every
// earlier one.
key_forms! {
    names: [acquire_lease, acquire_lease_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [
        owner: Option<&str>,
        ttl: Option<Interval>,
        timeout: default!(Option<Interval>, "NULL"),
    ],
    returns: i64,
    |fcinfo, function, keyed| {
        let wait = wait_argument(timeout);
        let granted = acquire(fcinfo, function, keyed, (owner, ttl, None), wait);
        granted.map(|(_, token)| token).expect("a wait ends in a grant or an error")
    },
}

// The same without waiting: NULL when another owner holds the key (or others wait in line).
key_forms! {
    names: [try_acquire_lease, try_acquire_lease_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [owner: Option<&str>, ttl: Option<Interval>,],
    returns: Option<i64>,
    |fcinfo, function, keyed| {
        acquire(fcinfo, function, keyed, (owner, ttl, None), Wait::Never).map(|(_, token)| token)
    },
}

// A permit of the key's lease semaphore of `permits` for `owner`, for `ttl`: one row (slot,
// token) once the owner holds one (the same row, the TTL extended) or a slot within `permits`
// is free, released or expired, waiting as acquire_lease waits. Renewed and released as any
// lease, by its token.
key_forms! {
    names: [acquire_lease_permit, acquire_lease_permit_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [
        permits: Option<i32>,
        owner: Option<&str>,
        ttl: Option<Interval>,
        timeout: default!(Option<Interval>, "NULL"),
    ],
    returns: TableIterator<'static, (name!(slot, i32), name!(token, i64))>,
    |fcinfo, function, keyed| {
        let permits = permit_argument(permits, function, "permits");
        let wait = wait_argument(timeout);
        let granted = acquire(fcinfo, function, keyed, (owner, ttl, Some(permits)), wait);
        TableIterator::new(granted.map(|(slot, token)| (i32::from(slot), token)))
    },
}

// The same without waiting: no row when no slot is free (or others wait in line).
key_forms! {
    names: [try_acquire_lease_permit, try_acquire_lease_permit_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [permits: Option<i32>, owner: Option<&str>, ttl: Option<Interval>,],
    returns: TableIterator<'static, (name!(slot, i32), name!(token, i64))>,
    |fcinfo, function, keyed| {
        let permits = permit_argument(permits, function, "permits");
        let granted = acquire(fcinfo, function, keyed, (owner, ttl, Some(permits)), Wait::Never);
        TableIterator::new(granted.map(|(slot, token)| (i32::from(slot), token)))
    },
}

// Extends the lease held with `token` to `ttl` from now: the new expiry, or NULL when the
// lease is lost (taken over after expiry, released, or never held with that token). A lease
// that expired but was not taken over is still this token's, and is renewed.
key_forms! {
    names: [renew_lease, renew_lease_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [token: Option<i64>, ttl: Option<Interval>,],
    returns: Option<TimestampWithTimeZone>,
    |fcinfo, function, keyed| {
        let token = required(token, function, "token").or_raise();
        let ttl = lease_ttl(ttl, function);
        refuse_read_only(function);
        refuse_in_parallel_mode(function);
        with_lease_table(fcinfo, |lease, role| {
            let (ttl, delay) = (ttl.into_datum(), lock_delay().into_datum());
            let held = (keyed.key, token, role);
            let expires_at = write_held(lease, function, held, || {
                let (changes, expires_at) = renewal(&lease.columns, ttl, delay);
                (Rewrite::Set(changes), expires_at)
            })?;
            stats::one(keyed.key, Count::LeasesRenewed);
            unsafe { TimestampWithTimeZone::from_datum(expires_at.into(), false) }
        })
    },
}

// Releases the lease held with `token`: true, or false when no lease is held with it (taken
// over after expiry, released already, or never held). Wakes waiting acquires.
key_forms! {
    names: [release_lease, release_lease_named],
    attributes: [volatile, parallel_unsafe],
    arguments: [token: Option<i64>,],
    returns: bool,
    |fcinfo, function, keyed| {
        let token = required(token, function, "token").or_raise();
        refuse_read_only(function);
        refuse_in_parallel_mode(function);
        // The row goes: the key's next holder inserts its own, as a first lease does, and
        // no released row waits for the sweep.
        let released = with_lease_table(fcinfo, |lease, role| {
            write_held(lease, function, (keyed.key, token, role), || (Rewrite::Delete, ()))
        })
        .is_some();
        if released {
            wakeups::wake_at_commit(keyed.key);
            stats::one(keyed.key, Count::LeasesReleased);
        }
        released
    },
}

/// When a lease that expires unreleased at `expires_at`, with `lock_delay`, is available to
/// another owner: their sum, 'infinity' past the end of time (fenced_leases' available_at; a
/// row of any origin reads without an error).
#[pg_extern(stable, strict, parallel_safe, schema = "fenced_lock_internal")]
fn fenced_lease_available_at(
    expires_at: TimestampWithTimeZone,
    lock_delay: Interval,
) -> TimestampWithTimeZone {
    let at = saturating_plus(
        expires_at.into_inner(),
        lock_delay.into_datum().expect("a datum"),
    );
    unsafe { TimestampWithTimeZone::from_datum(at.into(), false) }.expect("a timestamp")
}
