//! The boundary between accord's semantics (in `client`, `lease`, `keepalive`, `waiters`,
//! `subscription`) and a coordinator that stores keys and carries notifications.
//!
//! A backend only executes single statements with the coordinator's clock; it never decides
//! when to renew, how long to wait, or when a lease counts as lost. Those rules live in the
//! core so that every backend keeps them the same way.

mod by_url;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
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
use crate::options::{KeyCounts, ListPage, ListQuery, PoolCounts};

/// A duration as whole milliseconds, for a statement's bigint parameter (saturating).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

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
    /// Shared (many holders) rather than exclusive; only [`Backend::acquire_queued`] grants
    /// shared.
    pub shared: bool,
    /// For [`Backend::acquire_queued`]: the caller's place in line from its previous try.
    pub ticket: Option<i64>,
    /// For [`Backend::acquire_queued`]: take a place in line when not granted.
    pub enqueue: bool,
}

pub(crate) struct Granted {
    pub fence: i64,
    pub expires_at: DateTime<Utc>,
    pub metadata: Metadata,
}

pub(crate) enum AcquireOutcome {
    Granted(Granted),
    /// Held by a live lease, shared holders, or waiters in line (a plain acquire never jumps
    /// the line); or a concurrent change hid the row from this statement's snapshot.
    Held,
    /// From [`Backend::acquire_queued`]: not granted yet. `ticket` is the caller's place in
    /// line (`None` when it asked not to queue); `remaining`, how long until the soonest blocker
    /// (a holder, or a waiter ahead that stopped renewing its place) may end.
    Queued {
        ticket: Option<i64>,
        remaining: Option<Duration>,
    },
    Done,
}

/// The live exclusive holder of a key, as an election reads its leader.
pub(crate) struct Holder {
    pub owner: String,
    pub fence: i64,
    pub expires_at: DateTime<Utc>,
    pub metadata: Metadata,
    pub granted_at: DateTime<Utc>,
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

/// One lease of a batched keepalive (borrowing its key from the lease).
pub(crate) struct BatchItem<'a> {
    pub key: &'a str,
    pub fence: i64,
    pub ttl: Duration,
    /// A shared holder (a granted ticket) rather than the key's exclusive holder.
    pub shared: bool,
}

/// One key of a batched exclusive acquire (see [`AcquireRequest`]).
#[derive(Clone)]
pub(crate) struct AcquireItem {
    pub key: String,
    pub ttl: Duration,
    /// JSON object text, already validated.
    pub metadata: Option<String>,
    pub attempt: i64,
}

impl AcquireItem {
    /// This key's exclusive try in `namespace` for `owner`, without a place in line.
    pub fn request<'a>(&'a self, namespace: &'a str, owner: &'a str) -> AcquireRequest<'a> {
        AcquireRequest {
            namespace,
            key: &self.key,
            owner,
            ttl: self.ttl,
            metadata: self.metadata.as_deref(),
            attempt: self.attempt,
            shared: false,
            ticket: None,
            enqueue: false,
        }
    }
}

/// One lease of a batched done.
#[derive(Clone)]
pub(crate) struct DoneItem {
    pub key: String,
    pub fence: i64,
    /// JSON object text to merge, already validated.
    pub metadata: Option<String>,
}

/// One event to publish: its stream, payload, and the channel its stream's subscribers listen on.
pub(crate) struct PublishItem<'a> {
    pub stream: &'a str,
    pub payload: &'a str,
    pub channel: &'a str,
}

/// Where a published event landed.
pub(crate) struct Published {
    pub seq: i64,
    pub published_at: DateTime<Utc>,
    /// The stream has a retention rule: the publisher's client should trim it.
    pub retained: bool,
}

/// One stored event of a stream.
pub(crate) struct StoredEvent {
    pub seq: i64,
    pub payload: String,
    pub published_at: DateTime<Utc>,
}

/// One page of a stream read after a seq, as one snapshot saw the stream.
pub(crate) struct StreamPage {
    /// The stream's newest seq (0: never published).
    pub last_seq: i64,
    /// Up to the limit asked for, in seq order.
    pub events: Vec<StoredEvent>,
}

/// A stream's bounds and retention rule.
pub(crate) struct StreamState {
    /// The oldest stored seq (`last_seq + 1` when nothing is stored).
    pub first_seq: i64,
    pub last_seq: i64,
    pub max_len: Option<i64>,
    pub max_age: Option<Duration>,
}

/// What one read of a namespace for [`crate::Client::snapshot`] returns, raw (both stores read
/// it at once: PostgreSQL pipelines the statements in one round trip, SQLite reads them in one
/// transaction).
pub(crate) struct SnapshotRows {
    /// The page of keys under the prefix (`ListQuery` as given).
    pub page: ListPage,
    /// Every key under the prefix, counted by state (a key held shared counts once, as held),
    /// and the shared holders among them.
    pub counts: KeyCounts,
    /// The rows of the recipes' ranges (groups and fleets), every state, in key order.
    pub recipes: ListPage,
    /// Each stream with each named consumer's acknowledged seq, in (stream, consumer) order.
    pub streams: Vec<StreamRow>,
    /// More streams (or consumers) than the limit asked for.
    pub streams_truncated: bool,
    /// Each key under the page's prefix with live waiting tickets (`rules::waits_in_line`),
    /// counted exclusive and shared, in key order, up to the limit asked for; every waiter
    /// under the prefix is counted in `counts.waiting`.
    pub waiters: Vec<KeyWaiters>,
    /// More keys with waiters than the limit asked for.
    pub waiters_truncated: bool,
}

/// The acquires waiting in line for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyWaiters {
    /// The key.
    pub key: String,
    /// Exclusive acquires in line.
    pub exclusive: u64,
    /// Shared acquires in line.
    pub shared: u64,
}

impl KeyWaiters {
    /// Every acquire in line: exclusive and shared.
    pub fn total(&self) -> u64 {
        self.exclusive + self.shared
    }
}

/// One stream, and one of its consumers (none: a stream nobody acknowledged in).
pub(crate) struct StreamRow {
    pub stream: String,
    pub first_seq: i64,
    pub last_seq: i64,
    pub consumer: Option<(String, i64)>,
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
    /// A key was released or finished: waiters may retry now. It names no key: `tag` is the
    /// key's [`crate::rules::wake_tag`] (`None`: the store had no secret to tag with; only a
    /// client without the secret looks then, and it wakes every waiter). `tickets`, when set, names the waiters in line to wake, `(first, last)`
    /// (`last` None: no bound); the others stay asleep (no herd). Without it, every waiter of
    /// the key looks. `pool`: the tag of the pool the key was offered to (one claimer of it
    /// looks); a pool's own tag in `tag` is an offer (every claimer of it looks). Whoever sent
    /// it, it only makes waiters try again.
    Wakeup {
        tag: Option<String>,
        tickets: Option<(i64, Option<i64>)>,
        pool: Option<String>,
    },
    /// The listening side reconnected; notifications may have been missed meanwhile.
    Reconnected,
}

/// Where a backend delivers [`BackendEvent`]s. Called on the backend's own task: it must not
/// block.
pub(crate) trait EventSink: Send + Sync {
    fn deliver(&self, event: BackendEvent);
}

/// Durable streams' statements (each store's `streams.rs`).
#[async_trait]
pub(crate) trait StreamStore {
    /// One statement: append the events to their streams (seqs in commit order, gapless per
    /// stream), and wake each stream's subscribers once. Answers in the order given.
    async fn publish(&self, namespace: &str, items: &[PublishItem<'_>]) -> Result<Vec<Published>>;
    /// Up to `limit` events of the stream after seq `after`, with the stream's newest seq.
    async fn read_stream(
        &self,
        namespace: &str,
        stream: &str,
        after: i64,
        limit: usize,
    ) -> Result<StreamPage>;
    async fn stream_state(&self, namespace: &str, stream: &str) -> Result<StreamState>;
    /// Stores the stream's retention rule (`None`: no bound of that kind).
    async fn set_retention(
        &self,
        namespace: &str,
        stream: &str,
        max_len: Option<i64>,
        max_age: Option<Duration>,
    ) -> Result<()>;
    /// Deletes the oldest events the retention rule no longer keeps, at most `limit` of them,
    /// without taking the lock publishers take. Returns how many went.
    async fn trim_stream(&self, namespace: &str, stream: &str, limit: usize) -> Result<u64>;
    /// Stores a consumer's position (it only moves forward).
    async fn ack(&self, namespace: &str, stream: &str, consumer: &str, seq: i64) -> Result<()>;
    /// A consumer's stored position.
    async fn acked(&self, namespace: &str, stream: &str, consumer: &str) -> Result<Option<i64>>;
}

#[async_trait]
pub(crate) trait Backend: StreamStore + Send + Sync + 'static {
    /// One statement: grant the key exclusively if it is free and nobody waits in line, else
    /// say why not.
    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<AcquireOutcome>;
    /// [`Backend::acquire`] for many distinct keys of one owner in one statement: an outcome per
    /// item, in order (`Granted`, `Done` or `Held`). A row another transaction holds locked at
    /// that instant is refused as held rather than waited for, so that rounds of different
    /// clients never wait on each other's rows (no deadlock between them).
    async fn acquire_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[AcquireItem],
    ) -> Result<Vec<AcquireOutcome>>;
    /// One statement: grant the key (shared or exclusive) if the caller's turn has come
    /// (`rules::grantable_in_turn`); otherwise keep or take its place in line.
    async fn acquire_queued(&self, request: &AcquireRequest<'_>) -> Result<AcquireOutcome>;
    /// Give up a place in line; the new head is woken if this was the head and the key is
    /// free. `pass_turn`: wake the head after `ticket` (the key free) even if `ticket` already
    /// left: a release named it while it was leaving.
    async fn leave_queue(
        &self,
        namespace: &str,
        key: &str,
        owner: &str,
        ticket: i64,
        pass_turn: bool,
    ) -> Result<()>;
    /// Free one shared hold if this grant still holds it (the last one out wakes the line).
    async fn release_shared(&self, lease: LeaseRef<'_>) -> Result<bool>;
    /// The key's live exclusive holder, if any.
    async fn holder(&self, namespace: &str, key: &str) -> Result<Option<Holder>>;
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
        items: &[BatchItem<'_>],
    ) -> Result<Vec<(i64, DateTime<Utc>)>>;
    /// [`Backend::renew_batch`], also telling the leases it did not renew apart: passed over
    /// because another transaction holds their row (an application's fenced check), or ended
    /// by their own grant in the holder's transaction (`fenced.rs`). A store without fenced
    /// transactions has neither.
    async fn renew_batch_settling(
        &self,
        namespace: &str,
        owner: &str,
        items: &[BatchItem<'_>],
    ) -> Result<RenewAnswer> {
        Ok(RenewAnswer {
            renewed: self.renew_batch(namespace, owner, items).await?,
            ..RenewAnswer::default()
        })
    }
    /// The schema of the functions the application's transaction calls (fenced writes), or
    /// why this store has none.
    fn fenced_schema(&self) -> std::result::Result<&str, &'static str> {
        Err(
            "fenced writes need accord's leases in the application's own PostgreSQL database, \
             and this client's store keeps them elsewhere: no transaction of the application \
             can check or finish a lease there",
        )
    }
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
    /// Deletes up to 1,000 member rows under `prefix` that nobody holds
    /// (`rules::member_row_is_sweepable`) and up to 1,000 dead tickets of the namespace
    /// (dead: see `rules::waits_in_line`). Returns how many of each went.
    async fn sweep(&self, namespace: &str, prefix: &str) -> Result<(u64, u64)>;
    async fn list(&self, namespace: &str, query: &ListQuery) -> Result<ListPage>;
    async fn notify(&self, channel: &str, payload: &str) -> Result<()>;
    /// [`Backend::notify`] for many (channel, payload) pairs in one statement and transaction,
    /// delivered in this order. Never two identical pairs (PostgreSQL would deliver them once).
    async fn notify_batch(&self, notifications: &[(&str, &str)]) -> Result<()>;
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
    /// One read of what `accord top` shows: `page`'s keys, the counts under its prefix, the
    /// recipes' rows (`recipes`), up to `streams` streams' consumers and up to `waiter_keys`
    /// keys with waiters under the prefix (see [`SnapshotRows`]).
    async fn snapshot(
        &self,
        namespace: &str,
        page: &ListQuery,
        recipes: &ListQuery,
        streams: usize,
        waiter_keys: usize,
    ) -> Result<SnapshotRows>;
    /// The largest payload `notify` carries, in bytes.
    fn max_payload(&self) -> usize;
    /// Start receiving `channel` (reference-counted: only the first call subscribes). Returns
    /// once notifications sent from now on will be delivered.
    async fn listen(&self, channel: &str) -> Result<()>;
    /// Undo one `listen`.
    async fn unlisten(&self, channel: &str);
    /// Make sure [`BackendEvent::Wakeup`]s flow; returns once they do.
    async fn watch_wakeups(&self) -> Result<()>;
    /// The secret this store's wake-ups are tagged with (`rules::wake_tag`); `None` when it
    /// has none (every wake-up then wakes every waiter of the client).
    fn wake_secret(&self) -> Option<String>;
    /// The channels the listening connection has LISTENed, as the server reports them.
    async fn listening_channels(&self) -> Result<Vec<String>>;
    /// The store's revision up to which this client's watch has seen every event (etcd; `None`
    /// where there is none, or before it started): a diagnostic for tests.
    fn watched_through(&self) -> Option<i64> {
        None
    }
    fn close(&self);
}

pub(crate) type DynBackend = Arc<dyn Backend>;

/// What a keepalive tick learned of its leases (`Backend::renew_batch_settling`), by fence.
#[derive(Debug, Default)]
pub(crate) struct RenewAnswer {
    /// Renewed, with the new expiry.
    pub renewed: Vec<(i64, DateTime<Utc>)>,
    /// Still live, but their row was locked by another transaction: try again shortly.
    pub skipped: Vec<i64>,
    /// Marked done by this very grant (in the holder's own transaction).
    pub done: Vec<i64>,
    /// Released by this very grant (in the holder's own transaction).
    pub released: Vec<i64>,
}

/// Reads a wake-up payload, `[tag, first, last, pool]` (see [`BackendEvent::Wakeup`]; any
/// may be null); both stores write this shape. Anything else is no wake-up.
pub(crate) fn parse_wakeup(payload: &str) -> Option<BackendEvent> {
    let parts: Vec<serde_json::Value> = serde_json::from_str(payload).ok()?;
    if parts.len() != 4 {
        return None;
    }
    let text = |i: usize| parts[i].as_str().map(str::to_string);
    let number = |i: usize| parts[i].as_i64();
    Some(BackendEvent::Wakeup {
        tag: text(0),
        tickets: number(1).map(|first| (first, number(2))),
        pool: text(3),
    })
}

/// The payload [`parse_wakeup`] reads (tags from `rules::wake_tag`).
pub(crate) fn wakeup_payload(
    tag: Option<&str>,
    tickets: Option<(i64, Option<i64>)>,
    pool: Option<&str>,
) -> String {
    let (first, last) = match tickets {
        Some((first, last)) => (Some(first), last),
        None => (None, None),
    };
    serde_json::json!([tag, first, last, pool]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wake-up's (tag, tickets, pool).
    type Parsed = (Option<String>, Option<(i64, Option<i64>)>, Option<String>);

    fn parsed(payload: &str) -> Option<Parsed> {
        match parse_wakeup(payload)? {
            BackendEvent::Wakeup { tag, tickets, pool } => Some((tag, tickets, pool)),
            _ => None,
        }
    }

    #[test]
    fn wakeups_read_back_what_was_written() {
        let payload = wakeup_payload(Some("t"), Some((4, None)), Some("p"));
        assert_eq!(
            parsed(&payload),
            Some((Some("t".into()), Some((4, None)), Some("p".into())))
        );
        let payload = wakeup_payload(Some("t"), None, None);
        assert_eq!(payload, r#"["t",null,null,null]"#);
        assert_eq!(parsed(&payload), Some((Some("t".into()), None, None)));
    }

    #[test]
    fn names_are_no_wakeup() {
        // The old shape `[namespace, key]` is no wake-up; `[namespace, key, first, last]`
        // reads as the tag "ns" (no key's: tags are hex digests) naming no tickets.
        assert!(parsed(r#"["ns","key"]"#).is_none());
        assert_eq!(
            parsed(r#"["ns","key",1,1]"#),
            Some((Some("ns".into()), None, None))
        );
        assert!(parsed("").is_none());
        assert!(parsed("{}").is_none());
    }
}
