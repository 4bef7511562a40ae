//! The client's etcd leases: one per ttl class (whole seconds), carrying every holder, shared
//! holder and waiter of that class, each kept alive by one keep-alive stream.
//!
//! Nothing here renews on its own: a lease is kept alive only when the core renews a grant of
//! its class (or a waiter retries), so a client whose core stopped renewing loses its keys at
//! the lease's expiry, as a row's expiry does on the other stores. etcd counts a lease's ttl
//! from the last keep-alive it received (a new leader extends every lease, never shortens one),
//! so a key granted on a lease expires no earlier than the last keep-alive's send + the class's
//! ttl; [`Leases::for_grant`] refreshes a lease whose last keep-alive is too old for the core's
//! deadline (counted from the grant's send) to come first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};

use super::members::Members;
use super::{counted, etcd_error};
use crate::error::Result;
use crate::session::safety_margin;
use crate::stats::Recorder;

/// One ttl class's lease.
pub(crate) struct ClassLease {
    pub id: i64,
    /// The class's ttl in whole seconds (what the client asks etcd for).
    pub seconds: i64,
    /// The ttl etcd last said the lease has, in seconds: the class's, or etcd's minimum ttl
    /// (about 1.5 election timeouts) when that is longer. The keys live that long after a
    /// keep-alive, so `expires_at` counts it.
    granted_seconds: std::sync::atomic::AtomicI64,
    /// When the last keep-alive (or the grant) that etcd answered was sent, on the monotonic
    /// clock and on this client's wall clock (milliseconds).
    last_sent: Mutex<(Instant, i64)>,
    /// The keep-alive stream, and the member it goes to.
    stream: tokio::sync::Mutex<Option<(usize, LeaseKeeper, LeaseKeepAliveStream)>>,
    dead: std::sync::atomic::AtomicBool,
}

impl ClassLease {
    fn is_dead(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn last_sent(&self) -> Instant {
        self.last_sent.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// When etcd frees the lease's keys at the earliest, on this client's clock (what
    /// `expires_at` shows; no grant depends on it): the last keep-alive's send plus the ttl
    /// etcd gave the lease.
    pub fn expires_ms(&self) -> i64 {
        let sent_ms = self.last_sent.lock().unwrap_or_else(|e| e.into_inner()).1;
        let seconds = self
            .granted_seconds
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(self.seconds);
        sent_ms.saturating_add(seconds.saturating_mul(1000))
    }

    /// Records the ttl an answer of etcd gave the lease (a grant's or a keep-alive's).
    fn granted(&self, ttl: i64) {
        self.granted_seconds
            .store(ttl, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A ttl as etcd's whole seconds: rounded up (a key lives at least its ttl), at least 1.
pub(crate) fn class_of(ttl: Duration) -> i64 {
    let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(seconds.max(1)).unwrap_or(i64::MAX)
}

/// How long etcd keeps a notification's record (a watch resumes within it).
const RETENTION: i64 = 60;

pub(crate) struct Leases {
    members: Arc<Members>,
    stats: Arc<Recorder>,
    /// The lease notifications are put on (never kept alive), and when it was granted.
    retention: tokio::sync::Mutex<Option<(i64, Instant)>>,
    classes: Mutex<HashMap<i64, Arc<ClassLease>>>,
    /// One grant of a new lease per class at a time.
    granting: tokio::sync::Mutex<()>,
}

impl Leases {
    pub fn new(members: Arc<Members>, stats: Arc<Recorder>) -> Leases {
        Leases {
            members,
            stats,
            retention: tokio::sync::Mutex::new(None),
            classes: Mutex::new(HashMap::new()),
            granting: tokio::sync::Mutex::new(()),
        }
    }

    pub fn class(&self, seconds: i64) -> Option<Arc<ClassLease>> {
        let classes = self.classes.lock().unwrap_or_else(|e| e.into_inner());
        classes.get(&seconds).filter(|l| !l.is_dead()).cloned()
    }

    /// The lease a grant of `ttl` goes on: the class's, kept alive recently enough that it
    /// outlives the core's deadline for a grant sent now, or a new one.
    pub async fn for_grant(&self, ttl: Duration) -> Result<Arc<ClassLease>> {
        let seconds = class_of(ttl);
        // The key expires no earlier than last_sent + seconds; the core's deadline is at most
        // now + ttl − margin. Half the margin is left as slack.
        let slack =
            Duration::from_secs(seconds as u64).saturating_sub(ttl) + safety_margin(ttl) / 2;
        for _ in 0..2 {
            if let Some(lease) = self.class(seconds) {
                if lease.last_sent().elapsed() <= slack {
                    return Ok(lease);
                }
                if self.keep_alive(&lease).await?.is_some() {
                    return Ok(lease);
                }
                continue;
            }
            let _one = self.granting.lock().await;
            if self.class(seconds).is_some() {
                continue;
            }
            let sent = (Instant::now(), super::records::client_ms());
            // A grant sent twice leaves an unused lease, which expires on its own.
            let grant = |client: etcd_client::Client| async move {
                client.lease_client().grant(seconds, None).await
            };
            let granted = counted(&self.stats, self.members.call(grant))
                .await
                .map_err(|e| etcd_error("grant a session lease", e))?;
            let lease = Arc::new(ClassLease {
                id: granted.id(),
                seconds,
                granted_seconds: granted.ttl().into(),
                last_sent: Mutex::new(sent),
                stream: tokio::sync::Mutex::new(None),
                dead: false.into(),
            });
            self.classes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(seconds, lease.clone());
            return Ok(lease);
        }
        Err(crate::error::Error::new(
            crate::error::ErrorKind::Connection,
            "grant a session lease: etcd let the lease expire twice in a row",
        ))
    }

    /// The lease a notification's record goes on: granted for a minute and never kept alive,
    /// replaced when half of that is gone, so that each record lives 30 to 60 s.
    pub async fn retention(&self) -> Result<i64> {
        let mut current = self.retention.lock().await;
        if let Some((id, granted)) = *current {
            if granted.elapsed() < Duration::from_secs(RETENTION as u64 / 2) {
                return Ok(id);
            }
        }
        let granted = Instant::now();
        let grant = |client: etcd_client::Client| async move {
            client.lease_client().grant(RETENTION, None).await
        };
        let answer = counted(&self.stats, self.members.call(grant))
            .await
            .map_err(|e| etcd_error("grant a notification lease", e))?;
        *current = Some((answer.id(), granted));
        Ok(answer.id())
    }

    /// The live lease with this id, if it is one of this client's.
    pub fn by_id(&self, id: i64) -> Option<Arc<ClassLease>> {
        let classes = self.classes.lock().unwrap_or_else(|e| e.into_inner());
        classes
            .values()
            .find(|l| l.id == id && !l.is_dead())
            .cloned()
    }

    /// One keep-alive of the lease: its remaining ttl in seconds, or `None` once etcd no
    /// longer has it (every key on it is gone).
    pub async fn keep_alive(&self, lease: &ClassLease) -> Result<Option<i64>> {
        if lease.is_dead() {
            return Ok(None);
        }
        let mut stream = lease.stream.lock().await;
        let sent = (Instant::now(), super::records::client_ms());
        // A stream that broke (its member went away) is replaced once, on another member. It
        // is taken out while in use: a call dropped between a keep-alive and its answer drops
        // the stream with it, so no later call reads that answer as its own.
        let mut ttl = None;
        // A stream whose member was taken for down (a call to it went unanswered) is dropped
        // unused: the keep-alive goes to a live member before the lease's ttl runs out.
        let usable = stream
            .take()
            .filter(|(member, _, _)| !self.members.is_down(*member));
        if let Some((member, mut keeper, mut replies)) = usable {
            let round_trip = async {
                keeper.keep_alive().await?;
                replies.message().await
            };
            let answer = counted(&self.stats, self.members.answered(member, round_trip)).await;
            match answer {
                Ok(Some(reply)) => {
                    ttl = Some(reply.ttl());
                    *stream = Some((member, keeper, replies));
                }
                // The stream ended or broke with its member: the next goes to another.
                Ok(None) => self.members.lost(member, &"the keep-alive stream ended"),
                Err(e) => self.members.failed(member, &e),
            }
        }
        let ttl = match ttl {
            Some(ttl) => ttl,
            None => {
                // A keep-alive sent twice only extends the lease from a later time.
                let open = |client: etcd_client::Client| {
                    let id = lease.id;
                    async move { client.lease_client().keep_alive(id).await }
                };
                // Opening the stream sends the first keep-alive and reads its answer.
                match counted(&self.stats, self.members.stream_at(open)).await {
                    Ok((member, (keeper, replies))) => {
                        *stream = Some((member, keeper, replies));
                        lease
                            .granted_seconds
                            .load(std::sync::atomic::Ordering::Relaxed)
                            .max(lease.seconds)
                            .max(1)
                    }
                    Err(etcd_client::Error::LeaseKeepAliveError(_)) => 0,
                    Err(e) => return Err(etcd_error("keep a session lease alive", e)),
                }
            }
        };
        if ttl <= 0 {
            lease.dead.store(true, std::sync::atomic::Ordering::Relaxed);
            *stream = None;
            return Ok(None);
        }
        let mut last = lease.last_sent.lock().unwrap_or_else(|e| e.into_inner());
        if sent.0 > last.0 {
            *last = sent;
            lease.granted(ttl);
        }
        Ok(Some(ttl))
    }

    /// Remaining ttl of any lease (another client's too), in seconds; `None` once gone.
    pub async fn time_to_live(&self, id: i64) -> Result<Option<i64>> {
        let read = |client: etcd_client::Client| async move {
            client.lease_client().time_to_live(id, None).await
        };
        let answer = counted(&self.stats, self.members.call(read))
            .await
            .map_err(|e| etcd_error("read a lease's ttl", e))?;
        Ok(Some(answer.ttl()).filter(|&t| t > 0))
    }

    /// Revokes every lease of this client (closing: one revoke per class).
    pub async fn revoke_all(&self) {
        let leases: Vec<Arc<ClassLease>> = {
            let mut classes = self.classes.lock().unwrap_or_else(|e| e.into_inner());
            classes.drain().map(|(_, l)| l).collect()
        };
        for lease in leases {
            lease.dead.store(true, std::sync::atomic::Ordering::Relaxed);
            let id = lease.id;
            let revoke =
                |client: etcd_client::Client| async move { client.lease_client().revoke(id).await };
            let _ = self.members.call(revoke).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_whole_seconds_rounded_up() {
        assert_eq!(class_of(Duration::from_millis(1)), 1);
        assert_eq!(class_of(Duration::from_secs(1)), 1);
        assert_eq!(class_of(Duration::from_millis(1500)), 2);
        assert_eq!(class_of(Duration::from_secs(60)), 60);
    }
}
