//! The statements a session groups into rounds (see [`super::rounds`]): exclusive acquires,
//! releases and dones, each with its single-key and its batch statement.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{AcquireItem, AcquireOutcome, AcquireRequest, DoneItem};
use crate::error::Result;
use crate::metadata::Metadata;

use super::rounds::{Kind, Rounds};
use super::scope::Scope;

/// The rounds of each kind in one session.
#[derive(Default)]
pub(crate) struct Batched {
    pub acquires: Rounds<Acquire>,
    pub releases: Rounds<Release>,
    pub dones: Rounds<Done>,
}

/// An exclusive acquire that does not wait in line (`try_acquire`, and a waiting acquire's
/// first try). Two tries of one key never share a round: the second waits for the next.
pub(crate) struct Acquire;

#[async_trait]
impl Kind for Acquire {
    type Item = AcquireItem;
    type Answer = AcquireOutcome;

    fn rounds(scope: &Scope) -> &Rounds<Self> {
        &scope.batched.acquires
    }

    fn distinct(item: &AcquireItem) -> Option<&str> {
        Some(&item.key)
    }

    async fn one(scope: &Arc<Scope>, item: &AcquireItem) -> Result<AcquireOutcome> {
        let request = AcquireRequest {
            namespace: &scope.namespace,
            key: &item.key,
            owner: &scope.owner,
            ttl: item.ttl,
            metadata: item.metadata.as_deref(),
            attempt: item.attempt,
            shared: false,
            ticket: None,
            enqueue: false,
        };
        scope.backend.acquire(&request).await
    }

    async fn many(scope: &Arc<Scope>, items: &[&AcquireItem]) -> Result<Vec<AcquireOutcome>> {
        let items: Vec<AcquireItem> = items.iter().map(|i| (*i).clone()).collect();
        scope
            .backend
            .acquire_batch(&scope.namespace, &scope.owner, &items)
            .await
    }

    /// A grant whose caller is gone is given back (fenced: it never frees a newer grant).
    fn unread(scope: &Arc<Scope>, item: AcquireItem, answer: AcquireOutcome) {
        if let AcquireOutcome::Granted(g) = answer {
            scope.give_back_later(item.key, g.fence);
        }
    }
}

/// A lease of one session ending: `(key, fence)`.
pub(crate) type Ending = (String, i64);

/// A release; answers whether the coordinator still recorded the grant.
pub(crate) struct Release;

#[async_trait]
impl Kind for Release {
    type Item = Ending;
    type Answer = bool;

    fn rounds(scope: &Scope) -> &Rounds<Self> {
        &scope.batched.releases
    }

    async fn one(scope: &Arc<Scope>, (key, fence): &Ending) -> Result<bool> {
        scope.backend.release(scope.lease_ref(key, *fence)).await
    }

    async fn many(scope: &Arc<Scope>, items: &[&Ending]) -> Result<Vec<bool>> {
        let items: Vec<Ending> = items.iter().map(|i| (*i).clone()).collect();
        let recorded: HashSet<i64> = scope
            .backend
            .release_batch(&scope.namespace, &scope.owner, &items)
            .await?
            .into_iter()
            .collect();
        Ok(items.iter().map(|(_, f)| recorded.contains(f)).collect())
    }
}

/// A done merging some metadata; answers the merged metadata, `None` when the coordinator no
/// longer recorded the grant.
pub(crate) struct Done;

#[async_trait]
impl Kind for Done {
    type Item = DoneItem;
    type Answer = Option<Metadata>;

    fn rounds(scope: &Scope) -> &Rounds<Self> {
        &scope.batched.dones
    }

    async fn one(scope: &Arc<Scope>, item: &DoneItem) -> Result<Option<Metadata>> {
        scope
            .backend
            .done(
                scope.lease_ref(&item.key, item.fence),
                item.metadata.as_deref(),
            )
            .await
    }

    async fn many(scope: &Arc<Scope>, items: &[&DoneItem]) -> Result<Vec<Option<Metadata>>> {
        let owned: Vec<DoneItem> = items.iter().map(|i| (*i).clone()).collect();
        let mut finished: HashMap<i64, Metadata> = scope
            .backend
            .done_batch(&scope.namespace, &scope.owner, &owned)
            .await?
            .into_iter()
            .collect();
        Ok(items.iter().map(|i| finished.remove(&i.fence)).collect())
    }
}
