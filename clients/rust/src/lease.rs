//! Leases: a connection of their own, a tokio task renewing every third of the ttl (each
//! renewal bounded by the validity), and a lost signal.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout_at};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config, Socket};
use tokio_util::sync::CancellationToken;

use crate::errors::{Error, ErrorKind};
use crate::statements::{self, interval, value};

/// Why a lease was lost: [`Error::reason`] of its [`ErrorKind::LeaseLost`] error, and the
/// `on_lost` callback's argument.
pub const LOST_NOT_HELD: &str = "renew_lease returned NULL: the lease was released or taken over";
/// The lease's validity ended before a renewal completed.
pub const LOST_DEADLINE: &str = "no renewal completed before the lease's validity ended";
/// Ended by [`Lease::release`].
pub const LOST_RELEASED: &str = "released";

/// Called once, with the reason, when a lease is lost (not on release), before its lost signal
/// fires.
pub type OnLost = Arc<dyn Fn(&str) + Send + Sync>;

/// How a lease is taken and kept.
#[derive(Clone)]
pub struct LeaseOptions {
    ttl: Duration,
    owner: Option<String>,
    wait: Option<Duration>,
    margin: Option<Duration>,
    on_lost: Option<OnLost>,
}

impl fmt::Debug for LeaseOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseOptions")
            .field("ttl", &self.ttl)
            .field("owner", &self.owner)
            .field("wait", &self.wait)
            .field("margin", &self.margin)
            .finish_non_exhaustive()
    }
}

impl LeaseOptions {
    /// A lease of `ttl`, renewed every third of it.
    pub fn new(ttl: Duration) -> Self {
        LeaseOptions {
            ttl,
            owner: None,
            wait: None,
            margin: None,
            on_lost: None,
        }
    }
    /// The owner id (by default one made for this call: [`new_owner`](crate::new_owner)). Give
    /// your own only when several processes must share one lease.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
    /// Wait up to `wait` for a held lease to be released or expire.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }
    /// Subtracted from the validity (default: a fifth of the ttl, at most 2 s).
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }
    /// Called once, with the reason, when the lease is lost (not on release).
    pub fn on_lost(mut self, on_lost: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(on_lost));
        self
    }
}

/// A lease's timing on the monotonic clock ([`Instant`], never the wall clock). The server
/// grants the ttl from the moment it runs the call, which is after the call was sent, so the
/// lease is known valid until the send time plus the ttl, less a margin (for the clocks' rates
/// and the time a write takes once the holder has checked). Renewals are due every third of
/// the ttl; one that fails for a passing reason is tried again sooner, while time remains.
#[derive(Debug)]
struct Clock {
    ttl: Duration,
    margin: Duration,
    retry: Duration,
    valid_until: Instant,
    next_renewal: Instant,
}

impl Clock {
    fn new(ttl: Duration, margin: Option<Duration>) -> Result<Self, Error> {
        let invalid = |message: &str| Error::new(ErrorKind::InvalidArgument, message);
        if ttl.is_zero() {
            return Err(invalid("the ttl must be positive"));
        }
        let margin = margin.unwrap_or_else(|| (ttl / 5).min(Duration::from_secs(2)));
        if margin >= ttl / 3 {
            return Err(invalid("the margin must be below a third of the ttl"));
        }
        let now = Instant::now();
        Ok(Clock {
            ttl,
            margin,
            retry: (ttl / 10).min(Duration::from_secs(1)),
            valid_until: now,
            next_renewal: now,
        })
    }

    fn renewed(&mut self, sent_at: Instant) {
        self.valid_until = sent_at + self.ttl;
        self.next_renewal = sent_at + self.ttl / 3;
    }

    /// When the lease stops being known valid: no renewal may complete after it.
    fn deadline(&self) -> Instant {
        self.valid_until - self.margin
    }
}

/// What the lease and its renewer share.
struct State {
    ns: i32,
    id: i32,
    token: i64,
    client: Client,
    clock: Mutex<Clock>,
    reason: Mutex<Option<String>>,
    lost: CancellationToken,
    stop: CancellationToken,
    broken: AtomicBool,
    on_lost: Option<OnLost>,
}

impl State {
    fn lose(&self, reason: &str, notify: bool) {
        {
            let mut current = self.reason.lock().unwrap();
            if current.is_some() {
                return;
            }
            *current = Some(reason.to_owned());
        }
        // The callback first: whoever the signal wakes finds it has run.
        if let (true, Some(on_lost)) = (notify, &self.on_lost) {
            on_lost(reason);
        }
        self.lost.cancel();
    }

    fn lose_connection(&self, error: &dyn fmt::Display) {
        self.broken.store(true, Ordering::SeqCst);
        self.lose(&format!("the connection was lost: {error}"), true);
    }

    async fn renew(self: Arc<Self>) {
        loop {
            let (next, deadline, ttl) = {
                let clock = self.clock.lock().unwrap();
                (clock.next_renewal, clock.deadline(), clock.ttl)
            };
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = self.lost.cancelled() => return,
                _ = sleep_until(next.into()) => {}
            }
            let sent_at = Instant::now();
            // After a pause (SIGSTOP, a stalled VM) the lease is past its validity: lost, and
            // nothing is sent.
            if sent_at >= deadline {
                return self.lose(LOST_DEADLINE, true);
            }
            let ttl = interval("ttl", ttl, true).expect("checked when the lease was taken");
            let params: [statements::Param; 4] = [
                (&self.ns, Type::INT4),
                (&self.id, Type::INT4),
                (&self.token, Type::INT8),
                (&ttl, Type::TEXT),
            ];
            // The renewal must complete before the validity ends (one hung on a dead link too).
            let renewal =
                value::<_, Option<SystemTime>>(&self.client, statements::RENEW_LEASE, &params);
            match timeout_at(deadline.into(), renewal).await {
                Err(_) => {
                    self.broken.store(true, Ordering::SeqCst);
                    return self.lose(LOST_DEADLINE, true);
                }
                Ok(Err(error))
                    if matches!(error.kind(), ErrorKind::LockBusy | ErrorKind::Retryable) =>
                {
                    // Another transaction writing the row for a moment: again while time remains.
                    let mut clock = self.clock.lock().unwrap();
                    clock.next_renewal = Instant::now() + clock.retry;
                }
                Ok(Err(error)) if error.kind() == ErrorKind::ConnectionLost => {
                    return self.lose_connection(&error)
                }
                Ok(Err(error)) => return self.lose(&format!("renewal failed: {error}"), true),
                Ok(Ok(None)) => return self.lose(LOST_NOT_HELD, true),
                Ok(Ok(Some(_))) => self.clock.lock().unwrap().renewed(sent_at),
            }
        }
    }
}

/// A lease held for its owner, renewed in the background every third of its ttl on a
/// connection of its own, until [`release`](Lease::release) (or drop, which releases it in
/// the background).
///
/// Its lost signal ([`lost_signal`](Lease::lost_signal), [`lost`](Lease::lost)) fires when the
/// lease ends: released, or lost because a renewal found it no longer held, failed, or could
/// not complete before its validity ended (less the margin). A lease is never taken again
/// behind the holder's back: once lost, it stays lost.
pub struct Lease {
    state: Arc<State>,
    owner: String,
    /// The renewer's task and the connection's, until the lease is released.
    tasks: Option<(JoinHandle<()>, JoinHandle<()>)>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("ns", &self.state.ns)
            .field("id", &self.state.id)
            .field("owner", &self.owner)
            .field("token", &self.state.token)
            .field("lost", &self.state.reason.lock().unwrap())
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// The lease's fencing token.
    pub fn token(&self) -> i64 {
        self.state.token
    }
    /// The owner it is held for.
    pub fn owner(&self) -> &str {
        &self.owner
    }
    /// A token cancelled when the lease ends (cancelling it yourself does not end the lease).
    pub fn lost_signal(&self) -> CancellationToken {
        self.state.lost.child_token()
    }
    /// Waits until the lease ends.
    pub async fn lost(&self) {
        self.state.lost.cancelled().await
    }
    /// True once the lease has ended.
    pub fn is_lost(&self) -> bool {
        self.state.lost.is_cancelled()
    }
    /// How the lease ended, once it has.
    pub fn lost_reason(&self) -> Option<String> {
        self.state.reason.lock().unwrap().clone()
    }
    /// How long the lease is still known to be valid (zero once lost).
    pub fn valid_for(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.state
            .clock
            .lock()
            .unwrap()
            .deadline()
            .saturating_duration_since(Instant::now())
    }
    /// An [`ErrorKind::LeaseLost`] error unless the lease is still known to be valid: call it
    /// before each step of the work (the clock is read here, so a holder paused past its
    /// validity finds out at once).
    pub fn check(&self) -> Result<(), Error> {
        if Instant::now() >= self.state.clock.lock().unwrap().deadline() {
            self.state.lose(LOST_DEADLINE, true);
        }
        match self.lost_reason() {
            Some(reason) => Err(Error::lease_lost(&reason)),
            None => Ok(()),
        }
    }

    /// Ends the lease: true when the server released it (it was still this holder's). The lost
    /// signal fires (reason [`LOST_RELEASED`], no callback). After a loss it tries too, since a
    /// lease only known to be past its validity may still be this holder's; then its error is
    /// not returned. A renewal in flight is waited for, at most a third of the ttl (at least a
    /// second).
    pub async fn release(mut self) -> Result<bool, Error> {
        let tasks = self.tasks.take().expect("a lease is released once");
        end(Arc::clone(&self.state), tasks).await
    }
}

async fn end(state: Arc<State>, tasks: (JoinHandle<()>, JoinHandle<()>)) -> Result<bool, Error> {
    let (mut renewer, connection) = tasks;
    let was_lost = state.lost.is_cancelled();
    state.stop.cancel();
    let bound = (state.clock.lock().unwrap().ttl / 3).max(Duration::from_secs(1));
    if tokio::time::timeout(bound, &mut renewer).await.is_err() {
        renewer.abort();
        state.broken.store(true, Ordering::SeqCst);
    }
    state.lose(LOST_RELEASED, false);
    if state.broken.load(Ordering::SeqCst) || state.client.is_closed() {
        connection.abort();
        return Ok(false);
    }
    let params: [statements::Param; 3] = [
        (&state.ns, Type::INT4),
        (&state.id, Type::INT4),
        (&state.token, Type::INT8),
    ];
    let released = tokio::time::timeout(
        bound,
        value::<_, bool>(&state.client, statements::RELEASE_LEASE, &params),
    )
    .await;
    connection.abort();
    match released {
        Ok(Ok(released)) => Ok(released),
        _ if was_lost => Ok(false),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(Error::new(
            ErrorKind::ConnectionLost,
            format!("release_lease had no answer within {bound:?}"),
        )),
    }
}

impl Drop for Lease {
    /// A lease dropped unreleased is released in the background (on the current tokio runtime,
    /// if there is one); otherwise it expires by itself.
    fn drop(&mut self) {
        let Some(tasks) = self.tasks.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(end(Arc::clone(&self.state), tasks));
            }
            Err(_) => {
                self.state.stop.cancel();
                tasks.0.abort();
                tasks.1.abort();
            }
        }
    }
}

/// The lease on (ns, id), or None when another owner holds it (after waiting, with
/// [`LeaseOptions::wait`], for it to be released or expire). The lease's connection is opened
/// with `config` and `tls` (`tokio_postgres::NoTls` for none) and driven by a task on the
/// current tokio runtime.
pub async fn try_acquire_lease<T>(
    config: &Config,
    tls: T,
    ns: i32,
    id: i32,
    options: LeaseOptions,
) -> Result<Option<Lease>, Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let mut clock = Clock::new(options.ttl, options.margin)?;
    let ttl = interval("ttl", options.ttl, true)?;
    let wait = options
        .wait
        .map(|wait| interval("wait", wait, false))
        .transpose()?;
    let owner = options.owner.unwrap_or_else(statements::new_owner);
    let (client, connection) = config.connect(tls).await?;
    // The connection's end (an error, or the server gone) loses the lease at once.
    let ended = Arc::new(Mutex::new(None::<Arc<State>>));
    let watcher = Arc::clone(&ended);
    let connection = tokio::spawn(async move {
        let outcome = connection.await;
        if let Some(state) = watcher.lock().unwrap().take() {
            match outcome {
                Err(error) => state.lose_connection(&error),
                Ok(()) => state.lose_connection(&"the server closed it"),
            }
        }
    });
    let sent_at = Instant::now();
    let token: Option<i64> = match &wait {
        None => {
            let params: [statements::Param; 4] = [
                (&ns, Type::INT4),
                (&id, Type::INT4),
                (&owner, Type::TEXT),
                (&ttl, Type::TEXT),
            ];
            value(&client, statements::ACQUIRE_LEASE, &params).await
        }
        Some(wait) => {
            let params: [statements::Param; 5] = [
                (&ns, Type::INT4),
                (&id, Type::INT4),
                (&owner, Type::TEXT),
                (&ttl, Type::TEXT),
                (wait, Type::TEXT),
            ];
            // The wait ran out (55P03): busy, as without a wait.
            match value(&client, statements::ACQUIRE_LEASE_WAIT, &params).await {
                Err(error) if error.kind() == ErrorKind::LockBusy => Ok(None),
                other => other,
            }
        }
    }
    .inspect_err(|_| connection.abort())?;
    let Some(token) = token else {
        connection.abort();
        return Ok(None);
    };
    clock.renewed(sent_at);
    let state = Arc::new(State {
        ns,
        id,
        token,
        client,
        clock: Mutex::new(clock),
        reason: Mutex::new(None),
        lost: CancellationToken::new(),
        stop: CancellationToken::new(),
        broken: AtomicBool::new(false),
        on_lost: options.on_lost,
    });
    *ended.lock().unwrap() = Some(Arc::clone(&state));
    let renewer = tokio::spawn(Arc::clone(&state).renew());
    Ok(Some(Lease {
        state,
        owner,
        tasks: Some((renewer, connection)),
    }))
}

/// As [`try_acquire_lease`], but [`ErrorKind::LockBusy`] instead of None.
pub async fn acquire_lease<T>(
    config: &Config,
    tls: T,
    ns: i32,
    id: i32,
    options: LeaseOptions,
) -> Result<Lease, Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    try_acquire_lease(config, tls, ns, id, options)
        .await?
        .ok_or_else(|| {
            Error::new(
                ErrorKind::LockBusy,
                format!("the lease on ({ns}, {id}) is held by another owner"),
            )
        })
}
