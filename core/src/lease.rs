//! The [`Lease`] handle: a held key, a guard that releases when dropped. Its state lives in
//! the session's grant, which the keepalive renews and whose signals every binding reads.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::backend::{BatchItem, LeaseRef};
use crate::error::{Error, Result};
use crate::metadata::Metadata;
use crate::session::{Grant, LeaseStatus, LostReason, Session};
use crate::validate;

/// A key held by this client: `key`, `fence`, `owner`, `expires_at`, `metadata`, and the calls
/// `renew`, `release`, `done`. The keepalive renews it in the background until it is released,
/// done, or lost.
///
/// `Lease` is a guard: dropping a held lease releases it in the background. Call
/// [`Lease::release`] to release it and see the outcome.
pub struct Lease {
    pub(crate) session: Arc<Session>,
    pub(crate) grant: Arc<Grant>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.grant.key)
            .field("fence", &self.grant.fence)
            .field("owner", &self.owner())
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl Lease {
    pub(crate) fn new(session: Arc<Session>, grant: Arc<Grant>) -> Lease {
        Lease { session, grant }
    }

    /// The key held.
    pub fn key(&self) -> &str {
        &self.grant.key
    }

    /// The fencing token of this grant: larger than that of every earlier grant of any key.
    /// Pass it to the resources you write, and have them refuse smaller ones.
    pub fn fence(&self) -> i64 {
        self.grant.fence
    }

    /// The owner recorded for this lease (the client's owner).
    pub fn owner(&self) -> &str {
        &self.session.scope.owner
    }

    /// The namespace of the key.
    pub fn namespace(&self) -> &str {
        &self.session.scope.namespace
    }

    /// The ttl the lease is renewed with.
    pub fn ttl(&self) -> Duration {
        self.grant.ttl
    }

    /// The expiry the coordinator last confirmed (its clock).
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.grant.lock().expires_at
    }

    /// The key's metadata as of the latest grant, renew or done of this handle.
    pub fn metadata(&self) -> Metadata {
        self.grant.lock().metadata.clone()
    }

    /// Where the lease stands: held, ending, released, done, or lost and why. Checked against
    /// the deadline at each call, as [`Lease::is_lost`] is.
    pub fn status(&self) -> LeaseStatus {
        if self.session.is_forked() {
            return LeaseStatus::Lost(LostReason::Forked);
        }
        self.grant.check_deadline(Instant::now());
        self.grant.status()
    }

    /// True once the lease is lost: not renewed before its local deadline, found taken over,
    /// or its client closed while holding it. Checked against the deadline at each call, so it
    /// is exact even while the keepalive task has not run yet (say, right after the process
    /// was stopped and resumed).
    pub fn is_lost(&self) -> bool {
        matches!(self.status(), LeaseStatus::Lost(_))
    }

    /// G12 for a binding's own waits (say, on the lost signal): `Unsupported`, naming fork(),
    /// in a child process of the one that created the client.
    pub fn check_process(&self) -> Result<()> {
        self.session.check_fork()
    }

    /// Resolves when the lease is lost (or the client closes while holding it). Never
    /// resolves for a lease that is released or done normally.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let signal = self.lost_signal();
        async move { signal.wait().await }
    }

    /// The lease's signals, detached from the handle (for bindings that wait with their own
    /// timeouts). Holding it does not keep the lease held.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal {
            grant: self.grant.clone(),
            pid: self.session.pid(),
        }
    }

    fn lease_ref(&self) -> LeaseRef<'_> {
        self.session
            .scope
            .lease_ref(&self.grant.key, self.grant.fence)
    }

    /// Whether this is one of the key's shared holders (`AcquireOptions::shared`).
    pub fn is_shared(&self) -> bool {
        self.grant.shared
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
        self.session.check_usable()?;
        self.grant.require_held()?;
        if self.grant.shared {
            return self.renew_shared(metadata).await;
        }
        let sent = Instant::now();
        let renewed = self
            .session
            .scope
            .backend
            .renew(self.lease_ref(), self.grant.ttl, metadata.as_deref())
            .await?;
        match renewed {
            Some(r) => {
                self.grant
                    .confirm(sent, Instant::now(), r.expires_at, Some(r.metadata));
                self.grant.require_held()
            }
            None => {
                self.grant.mark_lost(LostReason::NotRecorded);
                Err(self.grant.error_for(self.grant.status()))
            }
        }
    }

    /// A shared holder's renewal: its expiry only (the key's metadata is its exclusive
    /// holders' to change), through the keepalive's statement.
    async fn renew_shared(&self, metadata: Option<String>) -> Result<()> {
        if metadata.is_some() {
            return Err(Error::invalid(
                "metadata",
                "a shared lease cannot change the key's metadata; acquire it exclusively",
            ));
        }
        let sent = Instant::now();
        let renewed = self
            .session
            .scope
            .backend
            .renew_batch(
                &self.session.scope.namespace,
                &self.session.scope.owner,
                &[BatchItem {
                    key: &self.grant.key,
                    fence: self.grant.fence,
                    ttl: self.grant.ttl,
                    shared: true,
                }],
            )
            .await?;
        match renewed.first() {
            Some((_, expires_at)) => {
                self.grant.confirm(sent, Instant::now(), *expires_at, None);
                self.grant.require_held()
            }
            None => {
                self.grant.mark_lost(LostReason::NotRecorded);
                Err(self.grant.error_for(self.grant.status()))
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
        self.session.check_usable()?;
        let _one_at_a_time = self.grant.ending.lock().await;
        if self.grant.check_deadline(Instant::now()) {
            return Err(self.grant.error_for(self.grant.status()));
        }
        if !self.grant.begin_ending(true)? {
            return Ok(());
        }
        let released = self
            .session
            .scope
            .release(&self.grant.key, self.grant.fence)
            .await;
        self.finish(released, LeaseStatus::Released)
    }

    /// Marks the key done (never granted again until `reset`), merging `metadata` into its
    /// metadata, and releases it. Done twice, or after losing the lease, fails with
    /// `LeaseLost`; on a closed client, with `Closed`. In flight, it keeps the deadline as
    /// [`Lease::release`] does.
    pub async fn done(&self, metadata: Option<Metadata>) -> Result<()> {
        if self.grant.shared {
            return Err(Error::invalid(
                "done",
                "a shared lease cannot mark its key done; acquire the key exclusively",
            ));
        }
        // A member's, shard's or leader's key marked done would keep its recipe from it.
        validate::unreserved("key", &self.grant.key)?;
        let text = metadata
            .as_ref()
            .map(|m| validate::metadata("metadata", m))
            .transpose()?;
        self.session.check_usable()?;
        let _one_at_a_time = self.grant.ending.lock().await;
        if self.grant.check_deadline(Instant::now()) {
            return Err(self.grant.error_for(self.grant.status()));
        }
        // Held, or ending after a release or done that failed on the way: a retry may go.
        self.grant.begin_ending(false)?;
        let done = self
            .session
            .scope
            .done(&self.grant.key, self.grant.fence, text)
            .await;
        let merged = done.as_ref().ok().and_then(Option::clone);
        self.finish(done.map(|d| d.is_some()), LeaseStatus::Done)?;
        if let Some(merged) = merged {
            self.grant.lock().metadata = merged;
        }
        Ok(())
    }

    /// Records the coordinator's answer to a release or done. A failed statement leaves the
    /// lease ending: not renewed, and lost at its deadline unless a retry succeeds first.
    fn finish(&self, answer: Result<bool>, ended: LeaseStatus) -> Result<()> {
        let recorded = answer?;
        self.session.keepalive.remove(self.grant.fence);
        self.grant.finish_ending(recorded, ended)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.session.abandon(&self.grant);
    }
}

/// A lease's signals, detached from the lease handle: lost, and ended (released, done or
/// lost). In a child process after fork() the lease counts as lost: the parent's lease was
/// never the child's.
#[derive(Clone)]
pub struct LostSignal {
    grant: Arc<Grant>,
    pid: u32,
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal")
            .field("key", &self.grant.key)
            .field("fence", &self.grant.fence)
            .field("status", &self.status())
            .finish()
    }
}

impl LostSignal {
    fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    /// True once the lease was lost.
    pub fn fired(&self) -> bool {
        self.forked() || self.grant.lost_token().is_cancelled()
    }

    /// Resolves when the lease is lost; never for a lease released or done normally.
    pub async fn wait(&self) {
        if self.forked() {
            return;
        }
        self.grant.lost_token().cancelled().await
    }

    /// The lease's status now (as [`Lease::status`], without the deadline check, which the
    /// keepalive makes on time).
    pub fn status(&self) -> LeaseStatus {
        if self.forked() {
            return LeaseStatus::Lost(LostReason::Forked);
        }
        self.grant.status()
    }

    /// Resolves when the lease ends in any way, with how it ended (`Released`, `Done` or
    /// `Lost`). Bindings wait on this rather than tracking the end of a lease themselves.
    pub async fn ended(&self) -> LeaseStatus {
        if !self.forked() {
            self.grant.ended_token().cancelled().await;
        }
        self.status()
    }
}
