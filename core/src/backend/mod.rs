//! The boundary between accord's semantics (in `client`, `lease`, `keepalive`, `waiters`,
//! `subscription`) and a coordinator that stores keys and carries notifications.
//!
//! A backend only executes single statements with the coordinator's clock; it never decides
//! when to renew, how long to wait, or when a lease counts as lost. Those rules live in the
//! core so that every backend keeps them the same way.

mod by_url;
pub(crate) mod postgres;
pub(crate) mod sqlite;

pub(crate) use by_url::open;

use std::sync::Arc;
use std::time::Duration;

/// PostgreSQL refuses NOTIFY payloads of 8000 bytes or more; the embedded store keeps the
/// same limit, so that applications move between stores unchanged.
pub(crate) const MAX_PAYLOAD: usize = 7999;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::metadata::Metadata;
use crate::options::{ListPage, ListQuery, PoolCounts};

/// Identifies one grant: what every fenced statement matches on (G5).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseRef<'a> {
    pub namespace: &'a str,
    pub key: &'a str,
    pub owner: &'a str,
    pub fence: i64,
}

pub(crate) struct AcquireRequest<'a> {
    pub namespace: &'a str,
    pub key: &'a str,
    pub owner: &'a str,
    pub ttl: Duration,
    /// JSON object text, already validated.
    pub metadata: Option<&'a str>,
    /// Random per acquire call: a retried statement whose first try was granted (but whose
    /// answer was lost with the connection) is granted again instead of waiting for itself.
    pub attempt: i64,
}

pub(crate) struct Granted {
    pub fence: i64,
    pub expires_at: DateTime<Utc>,
    pub metadata: Metadata,
}

pub(crate) enum AcquireOutcome {
    Granted(Granted),
    /// Held by a live lease; `remaining` is the holder's time left by the coordinator's clock
    /// (`None` when a concurrent change hid the row from this statement's snapshot).
    Held {
        remaining: Option<Duration>,
    },
    Done,
}

/// One claim statement: up to `limit` free keys of the pool offered under `pool`.
pub(crate) struct ClaimRequest<'a> {
    pub namespace: &'a str,
    pub pool: &'a str,
    pub owner: &'a str,
    pub limit: usize,
    pub ttl: Duration,
    pub metadata: Option<&'a str>,
    /// As for acquire: a retry re-grants what its lost first try granted.
    pub attempt: i64,
    /// Only keys below this one (a semaphore's permits under its limit).
    pub below: Option<&'a str>,
}

pub(crate) struct Claimed {
    /// The keys granted, with their grants.
    pub granted: Vec<(String, Granted)>,
    /// When nothing was granted: how long until the soonest holder of the pool expires.
    pub next_expiry: Option<Duration>,
}

pub(crate) struct Renewed {
    pub expires_at: DateTime<Utc>,
    pub metadata: Metadata,
}

/// One lease of a batched keepalive.
pub(crate) struct BatchItem {
    pub key: String,
    pub fence: i64,
    pub ttl: Duration,
}

/// One lease of a batched done.
pub(crate) struct DoneItem {
    pub key: String,
    pub fence: i64,
    /// JSON object text to merge, already validated.
    pub metadata: Option<String>,
}

pub(crate) enum ResetOutcome {
    Reset,
    NotFound,
    Held,
}

/// What a backend's listening side reports to the core.
#[derive(Debug)]
pub(crate) enum BackendEvent {
    Notification {
        channel: String,
        payload: String,
    },
    /// A key of `namespace` was released or finished: waiters may retry now.
    Wakeup {
        namespace: String,
        key: String,
    },
    /// The listening side reconnected; notifications may have been missed meanwhile.
    Reconnected,
}

/// Where a backend delivers [`BackendEvent`]s. Called on the backend's own task: it must not
/// block.
pub(crate) trait EventSink: Send + Sync {
    fn deliver(&self, event: BackendEvent);
}

#[async_trait]
pub(crate) trait Backend: Send + Sync + 'static {
    /// One statement: grant the key if it is free, else say why not.
    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<AcquireOutcome>;
    /// Extend one lease (and merge metadata); `None` when it is no longer held by this grant.
    async fn renew(
        &self,
        lease: LeaseRef<'_>,
        ttl: Duration,
        metadata: Option<&str>,
    ) -> Result<Option<Renewed>>;
    /// Extend many leases of one owner in one statement; returns the fences still held, with
    /// their new expiry.
    async fn renew_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[BatchItem],
    ) -> Result<Vec<(i64, DateTime<Utc>)>>;
    /// Free the key if this grant still holds it (and wake its waiters); false otherwise.
    async fn release(&self, lease: LeaseRef<'_>) -> Result<bool>;
    /// Mark the key done if this grant still holds it; `None` otherwise.
    async fn done(&self, lease: LeaseRef<'_>, metadata: Option<&str>) -> Result<Option<Metadata>>;
    /// [`Backend::release`] for many leases of one owner in one statement; returns the fences
    /// the coordinator still recorded (released now, or already by this very grant).
    async fn release_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[(String, i64)],
    ) -> Result<Vec<i64>>;
    /// [`Backend::done`] for many leases of one owner in one statement; returns the fences
    /// done (now, or already by this very grant) with their metadata.
    async fn done_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[DoneItem],
    ) -> Result<Vec<(i64, Metadata)>>;
    async fn reset(&self, namespace: &str, key: &str) -> Result<ResetOutcome>;
    async fn list(&self, namespace: &str, query: &ListQuery) -> Result<ListPage>;
    async fn notify(&self, channel: &str, payload: &str) -> Result<()>;
    /// Adds `keys` (each under `pool`, at most one statement's worth) to the pool; keys already
    /// in a pool stay as they are. Returns how many joined, and wakes the pool's claimers if any.
    async fn offer(
        &self,
        namespace: &str,
        pool: &str,
        keys: &[String],
        metadata: Option<&str>,
    ) -> Result<u64>;
    /// One statement: grant up to `limit` free keys of the pool, oldest offer first, never
    /// waiting for a row another claimer is granting.
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claimed>;
    /// Free, held and done keys of the pool.
    async fn counts(&self, namespace: &str, pool: &str) -> Result<PoolCounts>;
    /// The largest payload `notify` carries, in bytes.
    fn max_payload(&self) -> usize;
    /// Start receiving `channel` (reference-counted: only the first call subscribes). Returns
    /// once notifications sent from now on will be delivered.
    async fn listen(&self, channel: &str) -> Result<()>;
    /// Undo one `listen`.
    async fn unlisten(&self, channel: &str);
    /// Make sure [`BackendEvent::Wakeup`]s flow; returns once they do.
    async fn watch_wakeups(&self) -> Result<()>;
    /// The channels the listening connection has LISTENed, as the server reports them.
    async fn listening_channels(&self) -> Result<Vec<String>>;
    fn close(&self);
}

pub(crate) type DynBackend = Arc<dyn Backend>;
