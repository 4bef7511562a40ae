//! Where a session's statements go and on whose behalf: the backend, the namespace and the
//! owner. Background tasks (keepalive, give-backs, unlistens) hold this rather than the
//! session, so that they never keep a session alive after its last handle went.

use std::sync::Arc;

use crate::backend::{DynBackend, LeaseRef};

pub(crate) struct Scope {
    pub backend: DynBackend,
    pub namespace: String,
    pub owner: String,
    pub runtime: tokio::runtime::Handle,
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

    /// Releases a grant nobody will use (fenced, so it never frees a newer grant). Failures
    /// only mean the key stays held until its expiry.
    pub async fn give_back(&self, key: &str, fence: i64) {
        if let Err(e) = self.backend.release(self.lease_ref(key, fence)).await {
            tracing::debug!(target: "accord", key, fence, error = %e, "give-back failed; the lease expires at its ttl");
        }
    }

    /// [`Scope::give_back`] on the session's runtime, for callers that cannot wait.
    pub fn give_back_later(self: &Arc<Self>, key: String, fence: i64) {
        let scope = self.clone();
        self.runtime
            .spawn(async move { scope.give_back(&key, fence).await });
    }
}
