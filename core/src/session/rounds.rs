//! Client-side group commit: the statements that many tasks of one session issue at once
//! (exclusive acquires, releases, dones) share one statement per round and kind, as the
//! keepalive's renewals already do (G3). One commit then carries many grants or endings, so
//! the flush a durable server waits for per commit is paid once per round, not per caller.
//!
//! While one round's statement is in flight, the next round collects; when no round is in
//! flight, a round starts at once (no timer): its first caller yields once, so that calls
//! started together join it, and alone it sends its single-key statement from its own task,
//! so a lone caller's latency is that statement's. A round of one runs that statement too.
//! Each caller gets its own answer; an error of the round's statement reaches every caller of
//! that round.
//!
//! The rounds after the first run on a task of the session: a caller that stops waiting (its
//! future dropped) leaves the others' round intact, and an answer nobody reads any more is
//! undone by its kind (a grant given back).

use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::oneshot;

use crate::error::{Error, Result};

use super::scope::Scope;

/// The most items one round's statement carries; more wait for the next round.
pub(crate) const MAX_ROUND: usize = 1000;

/// A kind of statement that rounds carry: one item per caller, one answer per item.
#[async_trait]
pub(crate) trait Kind: Sized + Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Answer: Send + 'static;
    /// This kind's rounds in a session.
    fn rounds(scope: &Scope) -> &Rounds<Self>;
    /// A name no two items of one round may share (`None`: any may). Items that would share
    /// one wait for the next round, in their order.
    fn distinct(_item: &Self::Item) -> Option<&str> {
        None
    }
    /// The single-item statement.
    async fn one(scope: &Arc<Scope>, item: &Self::Item) -> Result<Self::Answer>;
    /// The batch statement: an answer per item, in order.
    async fn many(scope: &Arc<Scope>, items: &[&Self::Item]) -> Result<Vec<Self::Answer>>;
    /// Undoes an answer whose caller no longer waits for it.
    fn unread(_scope: &Arc<Scope>, _item: Self::Item, _answer: Self::Answer) {}
}

struct Pending<K: Kind> {
    item: K::Item,
    answer: oneshot::Sender<Result<K::Answer>>,
}

struct Queue<K: Kind> {
    pending: Vec<Pending<K>>,
    running: bool,
}

/// The pending items of one kind in a session, and whether a round is in flight.
pub(crate) struct Rounds<K: Kind> {
    queue: Mutex<Queue<K>>,
}

impl<K: Kind> Default for Rounds<K> {
    fn default() -> Self {
        Rounds {
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                running: false,
            }),
        }
    }
}

impl<K: Kind> Rounds<K> {
    /// Queues one item and waits for the round that carries it.
    ///
    /// The caller that finds no round in flight leads the next one: it yields once, so that
    /// calls started in the same breath (a `join_all` over a claimed batch, 64 tasks trying
    /// keys) join it, then takes the queue. Alone in it, it sends its own single statement
    /// from its own task (a lone caller pays one yield for group commit, no hand-over to
    /// another task); with company, the round and the ones after it run on a task of the
    /// session.
    pub async fn submit(scope: &Arc<Scope>, item: K::Item) -> Result<K::Answer> {
        let rounds = K::rounds(scope);
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut queue = rounds.queue.lock().unwrap();
            queue.pending.push(Pending { item, answer: tx });
            !std::mem::replace(&mut queue.running, true)
        };
        let answer = |rx: oneshot::Receiver<Result<K::Answer>>| async move {
            rx.await.map_err(|_| {
                Error::internal("the round carrying this statement ended without an answer")
            })?
        };
        if !lead {
            return answer(rx).await;
        }
        // From here on, whatever happens to this call (even its future dropped), what is
        // queued gets its round.
        let next = NextRound::<K>(scope.clone(), PhantomData);
        tokio::task::yield_now().await;
        let alone = {
            let mut queue = rounds.queue.lock().unwrap();
            if queue.pending.len() == 1 {
                queue.pending.pop()
            } else {
                None
            }
        };
        let Some(alone) = alone else {
            drop(next);
            return answer(rx).await;
        };
        let result = K::one(scope, &alone.item).await;
        drop(next);
        result
    }
}

/// When the leader is done with the queue (or dropped), the items queued meanwhile get a task
/// of the session to run their rounds; with none queued, no round is in flight any more.
struct NextRound<K: Kind>(Arc<Scope>, PhantomData<K>);

impl<K: Kind> Drop for NextRound<K> {
    fn drop(&mut self) {
        let more = {
            let mut queue = K::rounds(&self.0).queue.lock().unwrap();
            let more = !queue.pending.is_empty();
            queue.running = more;
            more
        };
        if more {
            self.0.runtime.spawn(run::<K>(self.0.clone()));
        }
    }
}

/// Runs rounds until nothing is pending.
async fn run<K: Kind>(scope: Arc<Scope>) {
    loop {
        let round = {
            let mut queue = K::rounds(&scope).queue.lock().unwrap();
            if queue.pending.is_empty() {
                queue.running = false;
                return;
            }
            take_round::<K>(&mut queue.pending)
        };
        run_round::<K>(&scope, round).await;
    }
}

/// The next round: up to [`MAX_ROUND`] items in queue order, no two sharing a distinct name.
fn take_round<K: Kind>(pending: &mut Vec<Pending<K>>) -> Vec<Pending<K>> {
    let mut names = HashSet::new();
    let (mut round, mut rest) = (Vec::new(), Vec::new());
    for p in pending.drain(..) {
        let fits = round.len() < MAX_ROUND
            && K::distinct(&p.item).is_none_or(|name| names.insert(name.to_string()));
        if fits {
            round.push(p);
        } else {
            rest.push(p);
        }
    }
    *pending = rest;
    round
}

async fn run_round<K: Kind>(scope: &Arc<Scope>, round: Vec<Pending<K>>) {
    let answers = if round.len() == 1 {
        K::one(scope, &round[0].item).await.map(|a| vec![a])
    } else {
        let items: Vec<&K::Item> = round.iter().map(|p| &p.item).collect();
        K::many(scope, &items).await
    };
    // A batch statement answers each item; a count that differs is an error of the round.
    let answers = answers.and_then(|answers| {
        if answers.len() == round.len() {
            Ok(answers)
        } else {
            Err(Error::internal(format!(
                "a round of {} statements got {} answers",
                round.len(),
                answers.len()
            )))
        }
    });
    match answers {
        Ok(answers) => {
            for (p, a) in round.into_iter().zip(answers) {
                if let Err(Ok(unread)) = p.answer.send(Ok(a)) {
                    K::unread(scope, p.item, unread);
                }
            }
        }
        Err(e) => {
            for p in round {
                let _ = p.answer.send(Err(e.copy_for_another_caller()));
            }
        }
    }
}
