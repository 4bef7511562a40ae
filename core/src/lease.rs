//! A held key: its handle ([`Lease`], a guard that releases when dropped) and the state the
//! handle shares with the keepalive ([`LeaseCore`]), including the lost signal of G4.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::backend::LeaseRef;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::{validate, Metadata};

/// The local deadline stops this much before the coordinator's expiry could come (G4): room for
/// clock-rate differences and for the holder to act on the lost signal.
pub(crate) fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(2))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Held,
    /// A release or done is in flight: no longer renewed, but still watched, so that lost
    /// fires at the deadline if the coordinator has not answered by then (G4).
    Ending,
    Released,
    Done,
    Lost(&'static str),
}

impl Phase {
    /// Held, or ending with a statement in flight: the deadline still applies.
    pub fn is_live(self) -> bool {
        matches!(self, Phase::Held | Phase::Ending)
    }
}

pub(crate) struct LeaseState {
    pub phase: Phase,
    pub expires_at: DateTime<Utc>,
    pub metadata: Metadata,
    /// Send time of the latest confirmed grant or renewal, on the monotonic clock.
    pub renewed_from: Instant,
}

/// What the lease handle and the keepalive share.
pub(crate) struct LeaseCore {
    pub key: String,
    pub fence: i64,
    pub ttl: Duration,
    pub state: Mutex<LeaseState>,
    lost: CancellationToken,
    /// One release or done at a time, so that a second one sees the first one's outcome
    /// instead of racing it.
    ending: tokio::sync::Mutex<()>,
}

impl LeaseCore {
    pub fn new(
        key: String,
        fence: i64,
        ttl: Duration,
        expires_at: DateTime<Utc>,
        metadata: Metadata,
        sent: Instant,
    ) -> Self {
        LeaseCore {
            key,
            fence,
            ttl,
            state: Mutex::new(LeaseState {
                phase: Phase::Held,
                expires_at,
                metadata,
                renewed_from: sent,
            }),
            lost: CancellationToken::new(),
            ending: tokio::sync::Mutex::new(()),
        }
    }

    /// G4: the send time of the last confirmed renewal + ttl − margin. The coordinator computed
    /// its expiry from a later instant (when it ran the statement), so this comes first.
    pub fn deadline(&self, state: &LeaseState) -> Instant {
        state.renewed_from + self.ttl - safety_margin(self.ttl)
    }

    /// When the keepalive wants to renew: a third of the ttl after the last renewal.
    pub fn renew_at(&self, state: &LeaseState) -> Instant {
        state.renewed_from + self.ttl / 3
    }

    /// Records a renewal the coordinator confirmed; `sent` is when its statement was sent.
    pub fn confirm(&self, sent: Instant, expires_at: DateTime<Utc>) {
        let mut state = self.state.lock().unwrap();
        if state.phase.is_live() && sent > state.renewed_from {
            // A confirmation arriving after the deadline passed cannot revive the lease: the
            // holder may already have acted on lost.
            if Instant::now() < self.deadline(&state) {
                state.renewed_from = sent;
                state.expires_at = expires_at;
            }
        }
    }

    /// Fires lost if the deadline has passed, whether or not a call is in flight. Returns
    /// whether the lease is lost.
    pub fn check_deadline(&self, now: Instant) -> bool {
        let mut state = self.state.lock().unwrap();
        if state.phase.is_live() && now >= self.deadline(&state) {
            state.phase = Phase::Lost("it was not renewed within its ttl");
            drop(state);
            self.fire_lost("not renewed within its ttl");
            return true;
        }
        matches!(state.phase, Phase::Lost(_))
    }

    /// True while a release or done of the lease is in flight.
    pub fn is_ending(&self) -> bool {
        self.state.lock().unwrap().phase == Phase::Ending
    }

    /// Marks a held lease lost (the coordinator no longer records this grant).
    pub fn mark_lost(&self, why: &'static str) -> bool {
        let mut state = self.state.lock().unwrap();
        if !state.phase.is_live() {
            return false;
        }
        state.phase = Phase::Lost(why);
        drop(state);
        self.fire_lost(why);
        true
    }

    fn fire_lost(&self, why: &str) {
        tracing::warn!(target: "accord", key = %self.key, fence = self.fence, reason = why, "lease lost");
        self.lost.cancel();
    }

    /// Ends a lease on client close: it is released, and its holder learns it no longer holds.
    pub fn end_with_close(&self) -> bool {
        let mut state = self.state.lock().unwrap();
        let was_held = state.phase.is_live();
        if was_held {
            state.phase = Phase::Released;
        }
        drop(state);
        self.lost.cancel();
        was_held
    }

    /// Checks that the lease may still be used by renew or done.
    fn require_held(&self) -> Result<()> {
        if self.check_deadline(Instant::now()) {
            return Err(self.lost_error());
        }
        match self.state.lock().unwrap().phase {
            Phase::Held => Ok(()),
            Phase::Ending => Err(Error::lease_lost(
                &self.key,
                self.fence,
                "it is being released or marked done",
            )),
            Phase::Released => Err(Error::lease_lost(&self.key, self.fence, "it was released")),
            Phase::Done => Err(Error::lease_lost(&self.key, self.fence, "it is done")),
            Phase::Lost(why) => Err(Error::lease_lost(&self.key, self.fence, why)),
        }
    }

    fn lost_error(&self) -> Error {
        let why = match self.state.lock().unwrap().phase {
            Phase::Lost(why) => why,
            _ => "it is no longer held",
        };
        Error::lease_lost(&self.key, self.fence, why)
    }
}

/// A key held by this client: `key`, `fence`, `owner`, `expires_at`, `metadata`, and the calls
/// `renew`, `release`, `done`. The keepalive renews it in the background until it is released,
/// done, or lost.
///
/// `Lease` is a guard: dropping a held lease releases it in the background. Call
/// [`Lease::release`] to release it and see the outcome.
pub struct Lease {
    pub(crate) client: Client,
    pub(crate) core: Arc<LeaseCore>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.core.key)
            .field("fence", &self.core.fence)
            .field("owner", &self.owner())
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// The key held.
    pub fn key(&self) -> &str {
        &self.core.key
    }

    /// The fencing token of this grant: larger than that of every earlier grant of any key.
    /// Pass it to the resources you write, and have them refuse smaller ones.
    pub fn fence(&self) -> i64 {
        self.core.fence
    }

    /// The owner recorded for this lease (the client's owner).
    pub fn owner(&self) -> &str {
        self.client.owner()
    }

    /// The client this lease belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The namespace of the key.
    pub fn namespace(&self) -> &str {
        self.client.namespace()
    }

    /// The ttl the lease is renewed with.
    pub fn ttl(&self) -> Duration {
        self.core.ttl
    }

    /// The expiry the coordinator last confirmed (its clock).
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.core.state.lock().unwrap().expires_at
    }

    /// The key's metadata as of the latest grant, renew or done of this handle.
    pub fn metadata(&self) -> Metadata {
        self.core.state.lock().unwrap().metadata.clone()
    }

    /// True once the lease is lost: not renewed before its local deadline, or found taken over.
    /// Checked against the deadline at each call, so it is exact even while the keepalive
    /// task has not run yet (say, right after the process was stopped and resumed).
    pub fn is_lost(&self) -> bool {
        // In a child process after fork() the lease is the parent's, never this process's.
        self.client.shared().is_forked()
            || self.core.check_deadline(Instant::now())
            || self.core.lost.is_cancelled()
    }

    /// Resolves when the lease is lost (or the client closes while holding it). Never
    /// resolves for a lease that is released or done normally.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let signal = self.lost_signal();
        async move { signal.wait().await }
    }

    /// The lost signal, detached from the handle (for bindings that wait with their own
    /// timeouts).
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal {
            token: self.core.lost.clone(),
            pid: self.client.shared().pid,
        }
    }

    fn lease_ref(&self) -> LeaseRef<'_> {
        self.client
            .shared()
            .lease_ref(&self.core.key, self.core.fence)
    }

    /// Extends the lease by its ttl now (the keepalive does this on its own).
    pub async fn renew(&self) -> Result<()> {
        self.renew_inner(None).await
    }

    /// Extends the lease and merges `metadata` into the key's metadata.
    pub async fn renew_with_metadata(&self, metadata: Metadata) -> Result<()> {
        let text = validate::metadata("metadata", &metadata)?;
        self.renew_inner(Some(text)).await
    }

    async fn renew_inner(&self, metadata: Option<String>) -> Result<()> {
        self.client.shared().check_usable()?;
        self.core.require_held()?;
        let sent = Instant::now();
        let renewed = self
            .client
            .shared()
            .backend
            .renew(self.lease_ref(), self.core.ttl, metadata.as_deref())
            .await?;
        match renewed {
            Some(r) => {
                self.core.confirm(sent, r.expires_at);
                self.core.state.lock().unwrap().metadata = r.metadata;
                self.core.require_held()
            }
            None => {
                self.core
                    .mark_lost("the coordinator no longer records this grant");
                Err(self.core.lost_error())
            }
        }
    }

    /// Releases the key and wakes its waiters. Releasing again, or after `done`, is harmless.
    /// After the lease was lost this fails with `LeaseLost`; on a closed client, with `Closed`.
    ///
    /// While the statement is in flight the lease is no longer renewed, but its deadline
    /// still holds: lost fires if it passes first (G4). The answer then says what the
    /// coordinator did: `Ok` if it still recorded this grant (the key was never anyone
    /// else's), `LeaseLost` if not.
    pub async fn release(&self) -> Result<()> {
        let shared = self.client.shared();
        shared.check_usable()?;
        let _one_at_a_time = self.core.ending.lock().await;
        if self.core.check_deadline(Instant::now()) {
            return Err(self.core.lost_error());
        }
        if !self.core.begin_ending(true)? {
            return Ok(());
        }
        let released = shared.backend.release(self.lease_ref()).await;
        self.core
            .finish_ending(shared, released.map(|r| r.then_some(())), Phase::Released)
    }

    /// Marks the key done (never granted again until `reset`), merging `metadata` into its
    /// metadata, and releases it. Done twice, or after losing the lease, fails with
    /// `LeaseLost`; on a closed client, with `Closed`. In flight, it keeps the deadline as
    /// [`Lease::release`] does.
    pub async fn done(&self, metadata: Option<Metadata>) -> Result<()> {
        let text = metadata
            .as_ref()
            .map(|m| validate::metadata("metadata", m))
            .transpose()?;
        let shared = self.client.shared();
        shared.check_usable()?;
        let _one_at_a_time = self.core.ending.lock().await;
        if self.core.check_deadline(Instant::now()) {
            return Err(self.core.lost_error());
        }
        // Held, or ending after a release or done that failed on the way: a retry may go.
        self.core.begin_ending(false)?;
        let done = shared.backend.done(self.lease_ref(), text.as_deref()).await;
        let merged = done.as_ref().ok().and_then(Option::clone);
        self.core
            .finish_ending(shared, done.map(|d| d.map(|_| ())), Phase::Done)?;
        if let Some(merged) = merged {
            self.core.state.lock().unwrap().metadata = merged;
        }
        Ok(())
    }
}

impl LeaseCore {
    /// Takes the lease out of renewal for a release or done. Returns false when there is
    /// nothing to end (already released or done: a release is then harmless).
    fn begin_ending(&self, release: bool) -> Result<bool> {
        let mut state = self.state.lock().unwrap();
        match state.phase {
            Phase::Held | Phase::Ending => {
                state.phase = Phase::Ending;
                Ok(true)
            }
            Phase::Released | Phase::Done if release => Ok(false),
            Phase::Released => Err(Error::lease_lost(&self.key, self.fence, "it was released")),
            Phase::Done => Err(Error::lease_lost(&self.key, self.fence, "it is done")),
            Phase::Lost(why) => Err(Error::lease_lost(&self.key, self.fence, why)),
        }
    }

    /// Records the coordinator's answer to a release or done: `Some` when it still recorded
    /// this grant. A failed statement leaves the lease ending: not renewed, and lost at its
    /// deadline unless a retry succeeds first.
    fn finish_ending(
        &self,
        shared: &crate::client::Shared,
        answer: Result<Option<()>>,
        ended: Phase,
    ) -> Result<()> {
        match answer? {
            Some(()) => {
                let mut state = self.state.lock().unwrap();
                if state.phase == Phase::Ending {
                    state.phase = ended;
                }
                drop(state);
                shared.keepalive.remove(self.fence);
                Ok(())
            }
            None => {
                self.mark_lost("the coordinator no longer records this grant");
                shared.keepalive.remove(self.fence);
                Err(self.lost_error())
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let held = {
            let mut state = self.core.state.lock().unwrap();
            let held = state.phase.is_live();
            if held {
                state.phase = Phase::Released;
            }
            held
        };
        if !held {
            return;
        }
        let shared = self.client.shared();
        shared.keepalive.remove(self.core.fence);
        if shared.check_usable().is_ok() {
            shared.give_back_later(self.core.key.clone(), self.core.fence);
        }
    }
}

/// A lease's lost signal, detached from the lease handle. In a child process after fork() it
/// has fired: the parent's lease was never the child's.
#[derive(Clone, Debug)]
pub struct LostSignal {
    token: CancellationToken,
    pid: u32,
}

impl LostSignal {
    /// True once the lease was lost.
    pub fn fired(&self) -> bool {
        self.token.is_cancelled() || std::process::id() != self.pid
    }
    /// Resolves when the lease is lost.
    pub async fn wait(&self) {
        if std::process::id() != self.pid {
            return;
        }
        self.token.cancelled().await
    }
}
