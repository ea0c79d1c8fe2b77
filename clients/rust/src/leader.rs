//! client-go's leader election on a lease.

use std::future::Future;
use std::time::Duration;

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, Socket};
use tokio_util::sync::CancellationToken;

use crate::errors::{Error, ErrorKind};
use crate::lease::{try_acquire_lease, LeaseOptions};
use crate::statements::new_owner;

/// Campaigns for (ns, id) until stopped, leading each time it wins: the term is the lease's
/// token, and ends when the lease is lost or the election stops.
#[derive(Clone, Debug)]
pub struct LeaderElection {
    config: Config,
    ns: i32,
    id: i32,
    ttl: Duration,
    retry_period: Option<Duration>,
    owner: String,
}

impl LeaderElection {
    /// A candidate for (ns, id) with a ttl of 15 s and an owner id of its own.
    pub fn new(config: Config, ns: i32, id: i32) -> Self {
        LeaderElection {
            config,
            ns,
            id,
            ttl: Duration::from_secs(15),
            retry_period: None,
            owner: new_owner(),
        }
    }
    /// The lease's ttl.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// How long each campaign waits on the server for the lease (half the ttl by default),
    /// woken at the leader's release.
    pub fn retry_period(mut self, retry_period: Duration) -> Self {
        self.retry_period = Some(retry_period);
        self
    }
    /// This candidate's owner id.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Campaigns until `stop` is cancelled. Each time it wins, awaits `on_elected(term,
    /// term_ended)` (the future should finish once `term_ended` is cancelled: the lease lost,
    /// or `stop`), releases the lease, calls `on_stopped()` (client-go's OnStoppedLeading), and
    /// campaigns again. A lost connection is retried after the retry period; another error ends
    /// the election.
    pub async fn run<T, F, Fut, S>(
        &self,
        tls: T,
        stop: CancellationToken,
        mut on_elected: F,
        mut on_stopped: S,
    ) -> Result<(), Error>
    where
        T: MakeTlsConnect<Socket> + Clone,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
        F: FnMut(i64, CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
        S: FnMut(),
    {
        let retry_period = self.retry_period.unwrap_or(self.ttl / 2);
        while !stop.is_cancelled() {
            let options = LeaseOptions::new(self.ttl)
                .owner(self.owner.clone())
                .wait(retry_period);
            let campaign = try_acquire_lease(&self.config, tls.clone(), self.ns, self.id, options);
            let lease = tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                lease = campaign => lease,
            };
            let lease = match lease {
                Ok(Some(lease)) => lease,
                Ok(None) => continue,
                Err(error) if error.kind() == ErrorKind::ConnectionLost => {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::time::sleep(retry_period) => {}
                    }
                    continue;
                }
                Err(error) => return Err(error),
            };
            // The term ends with the lease or with the election.
            let term_ended = lease.lost_signal();
            let work = on_elected(lease.token(), term_ended.clone());
            tokio::pin!(work);
            let finished = tokio::select! {
                _ = &mut work => true,
                _ = lease.lost() => false,
                _ = stop.cancelled() => false,
            };
            term_ended.cancel();
            let _ = lease.release().await; // a lease not released expires by itself
            if !finished {
                work.await;
            }
            on_stopped();
        }
        Ok(())
    }
}
