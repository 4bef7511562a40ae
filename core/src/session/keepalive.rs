//! G3 and G4: one task per client renews every held lease in one statement per tick, and fires
//! the lost signal of any lease whose local deadline passes without a confirmed renewal.
//!
//! A tick renews every lease that is due within half a renew interval, so leases acquired at
//! different moments fall into step after their first renewal and share one statement.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::grant::{Grant, LeaseStatus, LostReason};
use super::scope::Scope;
use crate::backend::{BatchItem, RenewAnswer};
use crate::error::Result;
use crate::stats::Timer;

const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How soon a lease whose row another transaction held (its renewal passed over) is tried
/// again: short next to the shortest ttl's renew-to-deadline span (100 ms: 33 to 90 ms).
const SKIPPED_RETRY: Duration = Duration::from_millis(25);
/// The most leases one renew statement carries. 100,000 leases in one statement took longer
/// than a 6 s ttl on a busy 2-core machine (measured: every lease lost); in chunks the
/// statements share the pool's connections and none grows with the number held.
pub(crate) const RENEW_CHUNK: usize = 10_000;

/// Hashes a fence: fences are distinct values of one sequence, so a multiply spreads them
/// well, and a tick of 100,000 leases spent a sixth of its CPU in the default (SipHash, made
/// to resist keys chosen by an attacker, which fences are not).
#[derive(Default)]
pub(crate) struct FenceHasher(u64);

impl Hasher for FenceHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i64(&mut self, fence: i64) {
        self.0 = (fence as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by fence.
pub(crate) type ByFence<V> = HashMap<i64, V, BuildHasherDefault<FenceHasher>>;

/// The leases a client holds, by fence (unique per grant).
#[derive(Default)]
pub(crate) struct Keepalive {
    held: Mutex<Held>,
    changed: Notify,
    /// Renew statements sent so far (observable in tests and benchmarks).
    ticks: std::sync::atomic::AtomicU64,
    /// Renewals the coordinator confirmed so far, one per lease renewed.
    renewals: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Held {
    by_fence: ByFence<Arc<Grant>>,
    /// When the task will look again, as its last scan decided (None before the first). Kept
    /// under the same lock as the map, so that an insert either is seen by a scan or sees the
    /// wake time that scan set.
    wake_at: Option<Instant>,
}

impl Keepalive {
    /// Wakes the task only when the new lease needs it sooner than it means to wake anyway:
    /// waking it for every grant would rescan every held lease per grant (quadratic when a
    /// client takes thousands of leases).
    ///
    /// Returns false, keeping nothing, once `closed` is cancelled: checked under the lock that
    /// [`Keepalive::take_all`] takes after the client cancels it, so that a grant adopted while
    /// the client closes is either taken by the close or refused here, never left behind.
    pub fn insert(&self, lease: Arc<Grant>, closed: &CancellationToken) -> bool {
        let needs_at = lease.renew_at(&lease.lock());
        let mut held = self.held.lock().unwrap();
        if closed.is_cancelled() {
            return false;
        }
        held.by_fence.insert(lease.fence, lease);
        let wake = held.wake_at.is_none_or(|at| needs_at < at);
        drop(held);
        if wake {
            self.changed.notify_one();
        }
        true
    }

    /// Has the task look at `lease` now (its holder's transaction may have finished it).
    pub fn look_now(&self, lease: &Grant) {
        lease.lock().look_now = true;
        self.changed.notify_one();
    }

    pub fn remove(&self, fence: i64) {
        self.held.lock().unwrap().by_fence.remove(&fence);
    }

    pub fn take_all(&self) -> Vec<Arc<Grant>> {
        self.held
            .lock()
            .unwrap()
            .by_fence
            .drain()
            .map(|(_, l)| l)
            .collect()
    }

    pub fn statements(&self) -> u64 {
        self.ticks.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn renewals(&self) -> u64 {
        self.renewals.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.held.lock().unwrap().by_fence.len()
    }
}

type Flight = Pin<Box<dyn std::future::Future<Output = Result<RenewAnswer>> + Send>>;

/// The leases of the tick in flight (its statements borrow their keys).
type Sent = Arc<Vec<Arc<Grant>>>;

struct Scan {
    due: Vec<Arc<Grant>>,
    lost: Vec<Arc<Grant>>,
    next_wake: Instant,
}

fn scan(keepalive: &Keepalive, now: Instant, may_send: bool, retry_after: Instant) -> Scan {
    let mut scan = Scan {
        due: Vec::new(),
        lost: Vec::new(),
        next_wake: now + Duration::from_secs(3600),
    };
    let mut held = keepalive.held.lock().unwrap();
    held.by_fence.retain(|_, lease| {
        let state = lease.lock();
        if !state.status.is_live() {
            return false;
        }
        let deadline = lease.deadline(&state);
        if now >= deadline {
            scan.lost.push(lease.clone());
            return false;
        }
        scan.next_wake = scan.next_wake.min(deadline);
        // A lease whose release or done is in flight is watched, not renewed.
        if may_send && state.status == LeaseStatus::Held {
            let renew_at = lease.renew_at(&state);
            // Due, or due within half a renew interval and confirmed at least that long ago:
            // it rides along in this tick's statement, so that leases fall into step. Timed
            // from the confirmation, not the send: a tick whose statements took longer than
            // half an interval would otherwise find every lease it just renewed due again
            // (measured at 100,000 leases: each renewed every 1.3 s instead of every 2 s).
            let early = lease.ttl / 6;
            if state.look_now
                || renew_at <= now
                || (renew_at <= now + early && now >= state.confirmed_at + early)
            {
                scan.due.push(lease.clone());
            } else {
                scan.next_wake = scan.next_wake.min(renew_at);
            }
        }
        true
    });
    // Backing off after a failed tick. (While a tick is in flight, its answer wakes the task.)
    if retry_after > now {
        scan.next_wake = scan.next_wake.min(retry_after);
    }
    held.wake_at = Some(scan.next_wake);
    scan
}

/// The keepalive task of one session; ends when `closed` fires.
pub(crate) async fn run(scope: Arc<Scope>, keepalive: Arc<Keepalive>, closed: CancellationToken) {
    let keepalive = &*keepalive;
    // The tick in flight: its statements, the leases they renew, when they were sent.
    let mut flight: Option<(Flight, Sent, Instant)> = None;
    let mut retry_after = Instant::now();
    let mut backoff = RETRY_MIN;
    loop {
        let now = Instant::now();
        let may_send = flight.is_none() && now >= retry_after;
        let scan = scan(keepalive, now, may_send, retry_after);
        for lease in &scan.lost {
            // A lost lease may still be recorded as ours (the coordinator was out of reach):
            // release it as soon as possible so that others need not wait for its expiry.
            if lease.check_deadline(now) && !closed.is_cancelled() {
                scope.give_back_later(lease.key.clone(), lease.fence);
            }
        }
        if !scan.due.is_empty() {
            let due = Arc::new(scan.due);
            let scope = scope.clone();
            let chunks = due.len().div_ceil(RENEW_CHUNK) as u64;
            keepalive
                .ticks
                .fetch_add(chunks, std::sync::atomic::Ordering::Relaxed);
            let sent = Instant::now();
            // A tick is one statement up to RENEW_CHUNK leases, and bounded statements sent
            // together beyond that (the pool pipelines them): no single statement grows with
            // the number of leases held. Any chunk failing fails the tick, which is retried
            // whole (renewing is idempotent): a lease is never judged by a missing answer.
            let sending = due.clone();
            let fut: Flight = Box::pin(async move {
                // The items borrow the keys: copying 100,000 keys per tick was a fifth of the
                // keepalive's CPU (profiled).
                let items: Vec<BatchItem<'_>> = sending
                    .iter()
                    .map(|l| BatchItem {
                        key: &l.key,
                        fence: l.fence,
                        ttl: l.ttl,
                        shared: l.shared,
                    })
                    .collect();
                let renewals = items.chunks(RENEW_CHUNK).map(|chunk| {
                    scope
                        .backend
                        .renew_batch_settling(&scope.namespace, &scope.owner, chunk)
                });
                let answers = futures_util::future::try_join_all(renewals).await?;
                let mut all = RenewAnswer::default();
                for a in answers {
                    all.renewed.extend(a.renewed);
                    all.skipped.extend(a.skipped);
                    all.done.extend(a.done);
                    all.released.extend(a.released);
                }
                Ok(all)
            });
            flight = Some((fut, due, sent));
        }
        tokio::select! {
            _ = tokio::time::sleep_until(scan.next_wake.into()) => {}
            _ = keepalive.changed.notified() => {}
            _ = closed.cancelled() => return,
            result = async { (&mut flight.as_mut().expect("guarded").0).await }, if flight.is_some() => {
                let (_, sent_leases, sent) = flight.take().expect("guarded");
                scope.stats.time(Timer::KeepaliveTick, sent.elapsed());
                match result {
                    Ok(answer) => {
                        backoff = RETRY_MIN;
                        keepalive
                            .renewals
                            .fetch_add(answer.renewed.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        let renewed: ByFence<DateTime<Utc>> = answer.renewed.into_iter().collect();
                        let ended: ByFence<LeaseStatus> = answer
                            .done
                            .into_iter()
                            .map(|f| (f, LeaseStatus::Done))
                            .chain(answer.released.into_iter().map(|f| (f, LeaseStatus::Released)))
                            .collect();
                        let skipped: ByFence<()> =
                            answer.skipped.into_iter().map(|f| (f, ())).collect();
                        let received = Instant::now();
                        // Rows another transaction holds (a fenced check, or the holder's own
                        // done in a transaction not yet ended) are tried again shortly; each
                        // such lease stays bound by its deadline meanwhile (docs/semantics.md,
                        // "Fenced writes").
                        if !skipped.is_empty() {
                            retry_after = received + SKIPPED_RETRY;
                        }
                        for lease in sent_leases.iter() {
                            if skipped.contains_key(&lease.fence) {
                                continue;
                            }
                            if let Some(to) = ended.get(&lease.fence) {
                                if lease.ended_in_transaction(*to) {
                                    keepalive.remove(lease.fence);
                                }
                                continue;
                            }
                            match renewed.get(&lease.fence) {
                                Some(expires_at) => lease.confirm(sent, received, *expires_at, None),
                                // A lease whose release or done went out meanwhile may be
                                // gone for that reason: that statement's answer decides.
                                None if lease.status() == LeaseStatus::Ending => {}
                                None => {
                                    if lease.mark_lost(LostReason::NotRecorded) {
                                        keepalive.remove(lease.fence);
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: "accord", error = %e, leases = sent_leases.len(), retry_in_ms = backoff.as_millis() as u64, "keepalive failed");
                        retry_after = Instant::now() + backoff;
                        backoff = (backoff * 2).min(RETRY_MAX);
                    }
                }
            }
        }
    }
}
