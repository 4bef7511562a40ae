//! Where a session's statements go and on whose behalf: the backend, the namespace and the
//! owner. Background tasks (keepalive, give-backs, unlistens) hold this rather than the
//! session, so that they never keep a session alive after its last handle went.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio_util::task::TaskTracker;

use crate::backend::{DoneItem, DynBackend, LeaseRef};
use crate::error::Result;
use crate::metadata::Metadata;
use crate::stats::Recorder;

use super::batched::{Batched, Done, Notification, Notify, Release};
use super::rounds::Rounds;

pub(crate) struct Scope {
    pub backend: DynBackend,
    pub namespace: String,
    pub owner: String,
    pub runtime: tokio::runtime::Handle,
    /// Exclusive tries, releases and dones in flight, grouped into one statement per round
    /// and kind.
    pub batched: Batched,
    /// Fences of this client's live shared grants: they are released by their own statement.
    pub shared_fences: Mutex<HashSet<i64>>,
    /// Stream publishes in flight, grouped into one statement at a time.
    pub publisher: super::publisher::Publisher,
    /// What this client did: counters and histograms (`Client::stats`).
    pub stats: Arc<Recorder>,
    /// Statements that may grant keys, from their send until their grants are adopted or given
    /// back, and the give-backs themselves: a close waits for them before it closes the
    /// connections, so that a grant landing during the close is released, not left to expire.
    pub granting: TaskTracker,
}

impl Scope {
    pub fn lease_ref<'a>(&'a self, key: &'a str, fence: i64) -> LeaseRef<'a> {
        LeaseRef {
            namespace: &self.namespace,
            key,
            owner: &self.owner,
            fence,
        }
    }

    /// Frees the key if this grant still holds it (or already freed it): true; false when the
    /// coordinator no longer records the grant. Shares a statement with concurrent endings.
    pub async fn release(self: &Arc<Self>, key: &str, fence: i64) -> Result<bool> {
        if self.is_shared(fence) {
            let released = self
                .backend
                .release_shared(self.lease_ref(key, fence))
                .await?;
            self.shared_fences.lock().unwrap().remove(&fence);
            return Ok(released);
        }
        Rounds::<Release>::submit(self, (key.to_string(), fence)).await
    }

    /// Records that grant `fence` is shared (before anyone may release it).
    pub fn mark_shared(&self, fence: i64) {
        self.shared_fences.lock().unwrap().insert(fence);
    }

    fn is_shared(&self, fence: i64) -> bool {
        self.shared_fences.lock().unwrap().contains(&fence)
    }

    /// Gives up a waiting acquire's place in line, in the background. Failures only mean the
    /// ticket expires at its ttl.
    pub fn leave_queue_later(self: &Arc<Self>, key: String, ticket: i64) {
        let scope = self.clone();
        self.runtime.spawn(async move {
            if let Err(e) = scope
                .backend
                .leave_queue(&scope.namespace, &key, &scope.owner, ticket, false)
                .await
            {
                tracing::debug!(target: "accord", key, ticket, error = %e, "leaving the line failed; the place expires at its ttl");
            }
        });
    }

    /// Marks the key done if this grant still holds it (or already did), with the merged
    /// metadata; `None` when the coordinator no longer records the grant. Shares a statement
    /// with concurrent endings.
    pub async fn done(
        self: &Arc<Self>,
        key: &str,
        fence: i64,
        metadata: Option<String>,
    ) -> Result<Option<Metadata>> {
        let item = DoneItem {
            key: key.to_string(),
            fence,
            metadata,
        };
        Rounds::<Done>::submit(self, item).await
    }

    /// Sends a notification; those that many tasks send at once share a statement.
    pub async fn notify(self: &Arc<Self>, channel: &str, payload: &str) -> Result<()> {
        Rounds::<Notify>::submit(self, Notification::new(channel, payload)).await
    }

    /// Releases a grant nobody will use (fenced, so it never frees a newer grant). Failures
    /// only mean the key stays held until its expiry.
    pub async fn give_back(self: &Arc<Self>, key: &str, fence: i64) {
        let _granting = self.granting.token();
        if let Err(e) = self.release(key, fence).await {
            tracing::debug!(target: "accord", key, fence, error = %e, "give-back failed; the lease expires at its ttl");
        }
    }

    /// [`Scope::give_back`] on the session's runtime, for callers that cannot wait.
    pub fn give_back_later(self: &Arc<Self>, key: String, fence: i64) {
        let scope = self.clone();
        // Counted from now, not from when the task first runs: a close under way waits for it.
        let granting = self.granting.token();
        self.runtime.spawn(async move {
            scope.give_back(&key, fence).await;
            drop(granting);
        });
    }
}
