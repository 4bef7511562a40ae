//! Client-side group commit for stream publishes, and the trimming that retention asks for.
//!
//! Publishes queue; one task of the session sends what is queued as one statement (at most
//! [`MAX_EVENTS`] events and [`MAX_BYTES`] of payload), and the next statement carries what
//! queued meanwhile. A lone publish is one statement; a thousand concurrent ones share a few.
//! The queue is first in, first out and one statement runs at a time, so events published one
//! after another from this client get increasing seqs in that order.
//!
//! A publish statement is not repeated after a connection failure: its answer may have been
//! lost after it committed, and a repeat would store the events twice. Its callers get the
//! error (the events may or may not be stored).
//!
//! Retention: after a statement touched a stream that has a rule, the stream is trimmed in the
//! background, at most once per [`TRIM_EVERY`] per stream from this client, by a statement
//! that never waits for publishers.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;

use super::scope::Scope;
use crate::backend::PublishItem;
use crate::error::{Error, Result};

/// The most events one publish statement carries.
pub(crate) const MAX_EVENTS: usize = 1000;
/// The most payload bytes one publish statement carries (at least one event always goes).
pub(crate) const MAX_BYTES: usize = 4 * 1024 * 1024;
/// How often this client trims a stream it publishes to, at most.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(1);
/// Streams whose last trim this client remembers before forgetting those trimmed over
/// [`TRIM_EVERY`] ago.
const TRIMMED_REMEMBERED: usize = 1024;
/// The most events one trim statement deletes; a trim repeats until fewer go.
pub(crate) const TRIM_BATCH: usize = 10_000;

struct Pending {
    stream: String,
    payload: String,
    channel: String,
    answer: oneshot::Sender<Result<(i64, DateTime<Utc>)>>,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Pending>,
    running: bool,
}

/// The publishes of one session waiting for their statement, and when each stream was last
/// trimmed.
#[derive(Default)]
pub(crate) struct Publisher {
    queue: Mutex<Queue>,
    trimmed: Mutex<HashMap<String, Instant>>,
}

/// One event to publish: its stream, payload, and the stream's wake-up channel.
pub(crate) struct Outgoing {
    pub stream: String,
    pub payload: String,
    pub channel: String,
}

impl Publisher {
    /// Queues the events (in this order, together) and waits for their seqs and times.
    pub async fn publish(
        scope: &Arc<Scope>,
        events: Vec<Outgoing>,
    ) -> Result<Vec<(i64, DateTime<Utc>)>> {
        let mut answers = Vec::with_capacity(events.len());
        let start = {
            let mut queue = scope.publisher.queue.lock().unwrap();
            for event in events {
                let (tx, rx) = oneshot::channel();
                queue.pending.push_back(Pending {
                    stream: event.stream,
                    payload: event.payload,
                    channel: event.channel,
                    answer: tx,
                });
                answers.push(rx);
            }
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            scope.runtime.spawn(run(scope.clone()));
        }
        let mut out = Vec::with_capacity(answers.len());
        for rx in answers {
            out.push(rx.await.map_err(|_| {
                Error::internal("the statement carrying this publish ended without an answer")
            })??);
        }
        Ok(out)
    }
}

/// Sends what is queued, one statement at a time, until the queue is empty.
async fn run(scope: Arc<Scope>) {
    loop {
        let batch: Vec<Pending> = {
            let mut queue = scope.publisher.queue.lock().unwrap();
            let mut bytes = 0;
            let mut n = 0;
            while n < queue.pending.len() && n < MAX_EVENTS {
                let size = queue.pending[n].payload.len();
                if n > 0 && bytes + size > MAX_BYTES {
                    break;
                }
                bytes += size;
                n += 1;
            }
            if n == 0 {
                queue.running = false;
                return;
            }
            queue.pending.drain(..n).collect()
        };
        let items: Vec<PublishItem<'_>> = batch
            .iter()
            .map(|p| PublishItem {
                stream: &p.stream,
                payload: &p.payload,
                channel: &p.channel,
            })
            .collect();
        let result = scope.backend.publish(&scope.namespace, &items).await;
        match result {
            Ok(published) if published.len() == batch.len() => {
                let mut retained = Vec::new();
                for (pending, p) in batch.into_iter().zip(published) {
                    if p.retained && !retained.contains(&pending.stream) {
                        retained.push(pending.stream.clone());
                    }
                    let _ = pending.answer.send(Ok((p.seq, p.published_at)));
                }
                for stream in retained {
                    trim_later(&scope, stream);
                }
            }
            Ok(published) => {
                let e = Error::internal(format!(
                    "a publish of {} events was answered with {} seqs",
                    batch.len(),
                    published.len()
                ));
                for pending in batch {
                    let _ = pending.answer.send(Err(e.copy_for_another_caller()));
                }
            }
            Err(e) => {
                for pending in batch {
                    let _ = pending.answer.send(Err(e.copy_for_another_caller()));
                }
            }
        }
    }
}

/// Trims `stream` in the background unless this client did within [`TRIM_EVERY`].
fn trim_later(scope: &Arc<Scope>, stream: String) {
    {
        let mut trimmed = scope.publisher.trimmed.lock().unwrap();
        let now = Instant::now();
        if trimmed
            .get(&stream)
            .is_some_and(|at| now.duration_since(*at) < TRIM_EVERY)
        {
            return;
        }
        // A client publishing to many streams keeps only the recent ones in mind.
        if trimmed.len() >= TRIMMED_REMEMBERED {
            trimmed.retain(|_, at| now.duration_since(*at) < TRIM_EVERY);
        }
        trimmed.insert(stream.clone(), now);
    }
    let scope = scope.clone();
    scope.runtime.clone().spawn(async move {
        if let Err(e) = trim(&scope, &stream).await {
            tracing::debug!(target: "accord", stream, error = %e, "trimming the stream failed; the next publish tries again");
        }
    });
}

/// Deletes what the stream's retention rule no longer keeps, a batch at a time.
pub(crate) async fn trim(scope: &Scope, stream: &str) -> Result<u64> {
    let mut total = 0;
    loop {
        let gone = scope
            .backend
            .trim_stream(&scope.namespace, stream, TRIM_BATCH)
            .await?;
        total += gone;
        if gone < TRIM_BATCH as u64 {
            return Ok(total);
        }
    }
}
