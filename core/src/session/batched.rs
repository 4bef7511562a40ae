//! The statements a session groups into rounds (see [`super::rounds`]): exclusive acquires,
//! claims, releases, dones and notifications, each with its single and its batch statement.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{AcquireItem, AcquireOutcome, ClaimRequest, Claimed, DoneItem};
use crate::error::Result;
use crate::metadata::Metadata;
use crate::validate::MAX_CLAIM_LIMIT;

use super::pool::ClaimAttempt;
use super::rounds::{Kind, Rounds};
use super::scope::Scope;

/// The rounds of each kind in one session.
#[derive(Default)]
pub(crate) struct Batched {
    pub acquires: Rounds<Acquire>,
    pub claims: Rounds<Claim>,
    pub releases: Rounds<Release>,
    pub dones: Rounds<Done>,
    pub notifications: Rounds<Notify>,
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
        let request = item.request(&scope.namespace, &scope.owner);
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

/// A claim from a work pool (or a semaphore's permits). Claims of one round asking the same
/// pool the same way (ttl, metadata, bound) go out as one claim of their limits' sum (at most
/// [`MAX_CLAIM_LIMIT`] a statement), and the keys it grants are dealt out in queue order: each
/// caller gets at most its limit, and one that gets none found nothing claimable, as it would
/// have alone.
pub(crate) struct Claim;

#[async_trait]
impl Kind for Claim {
    type Item = ClaimAttempt;
    type Answer = Claimed;

    fn rounds(scope: &Scope) -> &Rounds<Self> {
        &scope.batched.claims
    }

    async fn one(scope: &Arc<Scope>, item: &ClaimAttempt) -> Result<Claimed> {
        claim(scope, item, item.limit).await
    }

    async fn many(scope: &Arc<Scope>, items: &[&ClaimAttempt]) -> Result<Vec<Claimed>> {
        // Statements: items asking alike, in order, their limits summed up to MAX_CLAIM_LIMIT.
        let mut statements: Vec<(usize, Vec<usize>, usize)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let alike = statements.iter_mut().find(|(first, _, sum)| {
                let f = items[*first];
                *sum + item.limit <= MAX_CLAIM_LIMIT
                    && (&f.pool, f.ttl, &f.metadata, &f.below)
                        == (&item.pool, item.ttl, &item.metadata, &item.below)
            });
            match alike {
                Some((_, members, sum)) => {
                    members.push(i);
                    *sum += item.limit;
                }
                None => statements.push((i, vec![i], item.limit)),
            }
        }
        let sent = statements
            .iter()
            .map(|(first, _, sum)| claim(scope, items[*first], *sum));
        let outcomes = futures_util::future::join_all(sent).await;
        let mut answers: Vec<Option<Claimed>> = items.iter().map(|_| None).collect();
        let mut failed = None;
        for ((_, members, _), outcome) in statements.into_iter().zip(outcomes) {
            let claimed = match outcome {
                Ok(claimed) => claimed,
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            };
            let mut granted = claimed.granted.into_iter();
            for i in members {
                let mine: Vec<_> = granted.by_ref().take(items[i].limit).collect();
                let next_expiry = if mine.is_empty() {
                    claimed.next_expiry
                } else {
                    None
                };
                answers[i] = Some(Claimed {
                    granted: mine,
                    next_expiry,
                });
            }
        }
        if let Some(e) = failed {
            // Every caller of the round hears the error; grants of the statements that did
            // go through are given back (fenced), as a caller gone would have them.
            for claimed in answers.into_iter().flatten() {
                for (key, g) in claimed.granted {
                    scope.give_back_later(key, g.fence);
                }
            }
            return Err(e);
        }
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every claim belongs to one statement"))
            .collect())
    }

    fn unread(scope: &Arc<Scope>, _item: ClaimAttempt, answer: Claimed) {
        for (key, g) in answer.granted {
            scope.give_back_later(key, g.fence);
        }
    }
}

async fn claim(scope: &Scope, item: &ClaimAttempt, limit: usize) -> Result<Claimed> {
    scope
        .backend
        .claim(&ClaimRequest {
            namespace: &scope.namespace,
            pool: &item.pool,
            owner: &scope.owner,
            limit,
            ttl: item.ttl,
            metadata: item.metadata.as_deref(),
            attempt: item.token,
            below: item.below.as_deref(),
        })
        .await
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

/// A notification. Those that many tasks of one session send at once go out in one
/// statement, one transaction: each is still delivered once, in the order they were queued.
/// PostgreSQL delivers identical notifications (same channel, same payload) of one transaction
/// only once, so two of those never share a round: the second waits for the next.
pub(crate) struct Notify;

/// A notification of [`Notify`]'s rounds: the channel, the payload, and the two together (the
/// name no two of one round may share).
pub(crate) struct Notification {
    pub channel: String,
    pub payload: String,
    identity: String,
}

impl Notification {
    pub fn new(channel: &str, payload: &str) -> Notification {
        Notification {
            channel: channel.to_string(),
            payload: payload.to_string(),
            // A channel name never contains NUL (validated), so the pair splits one way only.
            identity: format!("{channel}\0{payload}"),
        }
    }
}

#[async_trait]
impl Kind for Notify {
    type Item = Notification;
    type Answer = ();

    fn rounds(scope: &Scope) -> &Rounds<Self> {
        &scope.batched.notifications
    }

    fn distinct(item: &Notification) -> Option<&str> {
        Some(&item.identity)
    }

    async fn one(scope: &Arc<Scope>, item: &Notification) -> Result<()> {
        scope.backend.notify(&item.channel, &item.payload).await
    }

    async fn many(scope: &Arc<Scope>, items: &[&Notification]) -> Result<Vec<()>> {
        let pairs: Vec<(&str, &str)> = items
            .iter()
            .map(|n| (n.channel.as_str(), n.payload.as_str()))
            .collect();
        scope.backend.notify_batch(&pairs).await?;
        Ok(vec![(); items.len()])
    }
}
