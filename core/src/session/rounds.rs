//! Client-side group commit: releases and dones that many tasks of one session issue at once
//! share one statement per round, as the keepalive's renewals already do (G3).
//!
//! While one round's statement is in flight, the next round collects; when no round is in
//! flight, a round starts at once (no timer): its first caller yields once, so that endings
//! started together join it, and alone it sends its single-lease statement from its own task,
//! so a lone caller's latency is that statement's. A round of one runs that statement too. Each caller
//! gets its own answer: the batch statements report, per fence, whether the coordinator still
//! recorded the grant; an error of the round's statement reaches every caller of that round.
//!
//! The rounds after the first run on a task of the session: a caller that stops waiting (its
//! future dropped) leaves the others' round intact.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::backend::DoneItem;
use crate::error::{Error, Result};
use crate::metadata::Metadata;

use super::scope::Scope;

/// The most leases one round's statement carries; more wait for the next round.
pub(crate) const MAX_ROUND: usize = 1000;

/// What a round ends: a release, or a done merging some metadata.
pub(crate) enum Ending {
    Release,
    Done { metadata: Option<String> },
}

/// The coordinator's answer for one lease: `None` when it no longer recorded the grant;
/// for a done, the merged metadata.
pub(crate) type Answer = Option<Option<Metadata>>;

struct Pending {
    key: String,
    fence: i64,
    answer: oneshot::Sender<Result<Answer>>,
}

#[derive(Default)]
struct Queue {
    releases: Vec<Pending>,
    dones: Vec<(Pending, Option<String>)>,
    running: bool,
}

/// The pending endings of one session, and whether a round is in flight.
#[derive(Default)]
pub(crate) struct Rounds {
    queue: Mutex<Queue>,
}

impl Rounds {
    /// Queues one ending and waits for the round that carries it.
    ///
    /// The caller that finds no round in flight leads the next one: it yields once, so that
    /// endings started in the same breath (a `join_all` over a claimed batch) join it, then
    /// takes the queue. Alone in it, it sends its own single statement from its own task (a
    /// lone caller pays one yield for group commit, no hand-over to another task); with
    /// company, the round and the ones after it run on a task of the session.
    pub async fn submit(
        scope: &Arc<Scope>,
        key: &str,
        fence: i64,
        ending: Ending,
    ) -> Result<Answer> {
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            key: key.to_string(),
            fence,
            answer: tx,
        };
        let lead = {
            let mut queue = scope.rounds.queue.lock().unwrap();
            match &ending {
                Ending::Release => queue.releases.push(pending),
                Ending::Done { metadata } => queue.dones.push((pending, metadata.clone())),
            }
            !std::mem::replace(&mut queue.running, true)
        };
        let answer = |rx: oneshot::Receiver<Result<Answer>>| async move {
            rx.await.map_err(|_| {
                Error::internal("the round carrying this statement ended without an answer")
            })?
        };
        if !lead {
            return answer(rx).await;
        }
        // From here on, whatever happens to this call (even its future dropped), what is
        // queued gets its round.
        let next = NextRound(scope.clone());
        tokio::task::yield_now().await;
        let alone = {
            let mut queue = scope.rounds.queue.lock().unwrap();
            if queue.releases.len() + queue.dones.len() == 1 {
                queue.releases.clear();
                queue.dones.clear();
                true
            } else {
                false
            }
        };
        if !alone {
            drop(next);
            return answer(rx).await;
        }
        let result = match ending {
            Ending::Release => release_one(scope, key, fence).await,
            Ending::Done { metadata } => done_one(scope, key, fence, metadata.as_deref()).await,
        };
        drop(next);
        result
    }
}

/// When the leader is done with the queue (or dropped), the endings queued meanwhile get a
/// task of the session to run their rounds; with none queued, no round is in flight any more.
struct NextRound(Arc<Scope>);

impl Drop for NextRound {
    fn drop(&mut self) {
        let more = {
            let mut queue = self.0.rounds.queue.lock().unwrap();
            let more = !(queue.releases.is_empty() && queue.dones.is_empty());
            queue.running = more;
            more
        };
        if more {
            self.0.runtime.spawn(run(self.0.clone()));
        }
    }
}

async fn release_one(scope: &Scope, key: &str, fence: i64) -> Result<Answer> {
    scope
        .backend
        .release(scope.lease_ref(key, fence))
        .await
        .map(|recorded| recorded.then_some(None))
}

async fn done_one(scope: &Scope, key: &str, fence: i64, metadata: Option<&str>) -> Result<Answer> {
    scope
        .backend
        .done(scope.lease_ref(key, fence), metadata)
        .await
        .map(|merged| merged.map(Some))
}

/// Runs rounds until nothing is pending.
async fn run(scope: Arc<Scope>) {
    loop {
        let (releases, dones) = {
            let mut queue = scope.rounds.queue.lock().unwrap();
            if queue.releases.is_empty() && queue.dones.is_empty() {
                queue.running = false;
                return;
            }
            let releases = take_round(&mut queue.releases);
            let dones = take_round(&mut queue.dones);
            (releases, dones)
        };
        // Releases and dones are different statements; both kinds of one round go out together
        // (the pool pipelines them), each answered on its own.
        tokio::join!(release_round(&scope, releases), done_round(&scope, dones));
    }
}

fn take_round<T>(pending: &mut Vec<T>) -> Vec<T> {
    let rest = pending.split_off(pending.len().min(MAX_ROUND));
    std::mem::replace(pending, rest)
}

async fn release_round(scope: &Scope, round: Vec<Pending>) {
    match round.len() {
        0 => {}
        1 => {
            let p = round.into_iter().next().expect("one");
            let _ = p.answer.send(release_one(scope, &p.key, p.fence).await);
        }
        _ => {
            let items: Vec<(String, i64)> =
                round.iter().map(|p| (p.key.clone(), p.fence)).collect();
            let outcome = scope
                .backend
                .release_batch(&scope.namespace, &scope.owner, &items)
                .await;
            match outcome {
                Ok(recorded) => {
                    let recorded: std::collections::HashSet<i64> = recorded.into_iter().collect();
                    for p in round {
                        let _ = p
                            .answer
                            .send(Ok(recorded.contains(&p.fence).then_some(None)));
                    }
                }
                Err(e) => answer_all(round, &e),
            }
        }
    }
}

async fn done_round(scope: &Scope, round: Vec<(Pending, Option<String>)>) {
    match round.len() {
        0 => {}
        1 => {
            let (p, metadata) = round.into_iter().next().expect("one");
            let _ = p
                .answer
                .send(done_one(scope, &p.key, p.fence, metadata.as_deref()).await);
        }
        _ => {
            let items: Vec<DoneItem> = round
                .iter()
                .map(|(p, metadata)| DoneItem {
                    key: p.key.clone(),
                    fence: p.fence,
                    metadata: metadata.clone(),
                })
                .collect();
            let outcome = scope
                .backend
                .done_batch(&scope.namespace, &scope.owner, &items)
                .await;
            match outcome {
                Ok(finished) => {
                    let finished: HashMap<i64, Metadata> = finished.into_iter().collect();
                    for (p, _) in round {
                        let answer = finished.get(&p.fence).cloned().map(Some);
                        let _ = p.answer.send(Ok(answer));
                    }
                }
                Err(e) => answer_all(round.into_iter().map(|(p, _)| p).collect(), &e),
            }
        }
    }
}

fn answer_all(round: Vec<Pending>, error: &Error) {
    for p in round {
        let _ = p.answer.send(Err(error.copy_for_another_caller()));
    }
}
