//! The client: connects to a coordinator by URL and offers acquire, try_acquire, reset, list,
//! notify and listen. It is the entry handle of a session (which owns the connections, the
//! keepalive and the closed and lost machinery); leases and subscriptions are the others.

use std::fmt;
use std::sync::Arc;

use crate::backend::ResetOutcome;
use crate::election::Election;
use crate::error::{Error, ErrorKind, Result};
use crate::fleet::{Fleet, FleetOptions};
use crate::lease::Lease;
use crate::membership::{self, JoinOptions, Member, MemberInfo, MemberWatch};
use crate::metadata::Metadata;
use crate::naming;
use crate::options::{
    AcquireOptions, ClaimOptions, ClientOptions, ListPage, ListQuery, PoolCounts,
};
use crate::semaphore::Semaphore;
use crate::session::Session;
use crate::stream::{self, StreamInfo, StreamRetention, StreamSubscription, SubscribeOptions};
use crate::subscription::Subscription;
use crate::validate;

/// A connection to a coordinator. Cheap to clone; all clones share connections, keepalive and
/// leases. Closes when [`Client::close`] is called or the last handle (client, lease or
/// subscription) is dropped.
///
/// ```no_run
/// # async fn run() -> accord::Result<()> {
/// use std::time::Duration;
/// use accord::{AcquireOptions, Client, ClientOptions};
///
/// let client = Client::connect("postgres://localhost/app", ClientOptions::new()).await?;
/// let lease = client
///     .acquire("reports/daily", AcquireOptions::new().timeout(Duration::from_secs(5)))
///     .await?;
/// println!("holding {} with fence {}", lease.key(), lease.fence());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    session: Arc<Session>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.namespace())
            .field("owner", &self.owner())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the coordinator named by `url`:
    /// `postgres://user:password@host:port/db?sslmode=…` (or `postgresql://`, or a libpq
    /// `key=value` string), `sqlite:///path/to/file` or `memory:` (`sqlite::memory:` is
    /// `memory:`; sqlite URLs take no query parameters). Applies pending migrations unless
    /// disabled.
    pub async fn connect(url: &str, options: ClientOptions) -> Result<Client> {
        Ok(Client {
            session: Session::open(url, &options).await?,
        })
    }

    /// The owner recorded on this client's leases.
    pub fn owner(&self) -> &str {
        &self.session.scope.owner
    }

    /// The namespace of this client's keys.
    pub fn namespace(&self) -> &str {
        &self.session.scope.namespace
    }

    /// G12 for a binding's own waits: `Unsupported`, naming fork(), when called in a child
    /// process of the one that created this client.
    pub fn check_process(&self) -> Result<()> {
        self.session.check_fork()
    }

    /// True once [`Client::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.session.is_closed()
    }

    /// Resolves once the client is closed (by [`Client::close`] or when its last handle went).
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.session.closed.clone().cancelled_owned()
    }

    /// What this client did since it connected: counters (acquires, grants, refusals,
    /// timeouts, cancellations, lost, releases, done, notifications, reconnects, statements)
    /// and latency histograms (acquire wait, hold time, statement round trip, keepalive tick)
    /// with p50 and p99. Counting is always on (relaxed atomic adds); the same figures also go
    /// to the `metrics` facade, as `accord_*`, for whatever exporter the program installs.
    pub fn stats(&self) -> crate::Stats {
        self.session.scope.stats.read()
    }

    /// Number of leases this client holds and keeps alive.
    pub fn held_count(&self) -> usize {
        self.session.keepalive.len()
    }

    /// Number of keepalive statements sent so far: one per tick for up to 10,000 leases held,
    /// and one more per further 10,000 (sent together).
    pub fn keepalive_statements(&self) -> u64 {
        self.session.keepalive.statements()
    }

    /// Number of renewals the keepalive has had confirmed so far: one per lease per renewal
    /// (a tick that renews 1,000 leases counts 1,000).
    pub fn keepalive_renewals(&self) -> u64 {
        self.session.keepalive.renewals()
    }

    /// Waits until `key` is granted, then returns its lease. Fails with `Done` if the key is
    /// done, `Timeout` after the options' timeout, `Cancelled` when its cancel token fires,
    /// `Closed` when the client closes. In every failure nothing is left held.
    pub async fn acquire(&self, key: &str, options: AcquireOptions) -> Result<Lease> {
        validate::unreserved("key", key)?;
        match self.session.acquire(key, options, true).await? {
            Some(grant) => Ok(Lease::new(self.session.clone(), grant)),
            None => Err(Error::internal(
                "a waiting acquire returned without a lease",
            )),
        }
    }

    /// Tries once: the lease if `key` is free, `None` if it is held (by anyone, including
    /// another handle of this client: leases are not re-entrant), `Done` if it is done.
    pub async fn try_acquire(&self, key: &str, options: AcquireOptions) -> Result<Option<Lease>> {
        validate::unreserved("key", key)?;
        Ok(self
            .session
            .acquire(key, options, false)
            .await?
            .map(|grant| Lease::new(self.session.clone(), grant)))
    }

    /// Offers `keys` to the work pool `prefix`: each becomes claimable by [`Client::claim`]
    /// (each key must start with the prefix; at most 5,000 per call, sent in statements of
    /// 1,000). Idempotent: a key already in a pool, held or done, stays as it is; a key
    /// acquired before without an offer joins the pool as it is. `metadata` is the metadata of
    /// keys new to the coordinator. Returns how many keys joined; wakes waiting claimers.
    pub async fn offer<I, S>(
        &self,
        prefix: &str,
        keys: I,
        metadata: Option<Metadata>,
    ) -> Result<u64>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        validate::unreserved("prefix", prefix)?;
        for key in &keys {
            validate::unreserved("key", key)?;
        }
        self.session.offer(prefix, &keys, metadata.as_ref()).await
    }

    /// Claims up to `options.limit` free keys of the work pool `prefix`, oldest offer first, in
    /// one statement; each is an ordinary [`Lease`]. Empty at once when nothing is claimable,
    /// or, with a timeout, after waiting for a release, an offer or an expiry in the pool.
    /// Concurrent claimers never wait for each other and never get the same key.
    pub async fn claim(&self, prefix: &str, options: ClaimOptions) -> Result<Vec<Lease>> {
        validate::unreserved("prefix", prefix)?;
        Ok(self
            .session
            .claim(prefix, options, None)
            .await?
            .into_iter()
            .map(|grant| Lease::new(self.session.clone(), grant))
            .collect())
    }

    /// How many keys of the work pool `prefix` are free, held and done.
    pub async fn counts(&self, prefix: &str) -> Result<PoolCounts> {
        self.session.counts(prefix).await
    }

    /// Opens the semaphore `name` with `limit` permits (1 ..= 10,000), offering the permits it
    /// needs. See [`Semaphore`] for what a changed limit does.
    pub async fn semaphore(&self, name: &str, limit: usize) -> Result<Semaphore> {
        Semaphore::open(&self.session, name, limit).await
    }

    /// Joins the group `group`: a [`Member`] whose lease (key `accord.group/<group>/<owner>`)
    /// the client's keepalive renews, with a lost signal. Watchers of the group see `Joined`.
    /// One membership per owner and group: a second join waits for the first to leave (up to
    /// the ttl, then `Timeout`).
    pub async fn join(&self, group: &str, options: JoinOptions) -> Result<Member> {
        validate::name("group", group)?;
        let prefix = membership::group_prefix(group);
        let channel = self.group_channel(&prefix);
        Member::join_at(&self.session, group, &prefix, channel, options).await
    }

    /// The live members of `group` (owner, metadata, since), oldest first, in one read.
    pub async fn members(&self, group: &str) -> Result<Vec<MemberInfo>> {
        validate::name("group", group)?;
        membership::read_members(&self.session, &membership::group_prefix(group)).await
    }

    /// Watches `group`: the current members, then `Joined`, `Left` and `Updated` in order. Woken by the
    /// group's notifications; the members table is the truth (a member whose process died
    /// leaves at its expiry, and missed notifications are healed on reconnection).
    pub async fn watch(&self, group: &str) -> Result<MemberWatch> {
        self.session.check_usable()?;
        validate::name("group", group)?;
        let prefix = membership::group_prefix(group);
        let channel = self.group_channel(&prefix);
        MemberWatch::open(&self.session, prefix, channel).await
    }

    fn group_channel(&self, prefix: &str) -> String {
        naming::channel_for("accord_group", &self.session.scope.namespace, &[prefix])
    }

    /// The election `name`: campaign to lead it, read or observe its leader. See
    /// [`Election`] and docs/semantics.md (Elections).
    pub fn election(&self, name: &str) -> Result<Election> {
        Election::open(&self.session, name)
    }

    /// How many times this client's waiting acquires were woken by another client's release
    /// (each release wakes the head of its key's line only). For tests and diagnostics.
    pub fn waiter_wakeups(&self) -> u64 {
        self.session.dispatch.waiters.woken()
    }

    /// How many of this client's waiting acquires hold a place in a key's line now.
    pub fn queued_count(&self) -> usize {
        self.session.dispatch.waiters.queued()
    }

    /// Joins the fleet `name` and starts balancing its shards in the background: see
    /// [`Fleet`] and docs/semantics.md (Membership and fleets).
    pub async fn fleet(&self, name: &str, options: FleetOptions) -> Result<Fleet> {
        Fleet::open(&self.session, name, options).await
    }

    /// Makes a done (or free) key unknown again, so that it can be acquired. `Ok(false)` if the
    /// key was not known; `Held` if a live lease holds it.
    pub async fn reset(&self, key: &str) -> Result<bool> {
        self.session.check_usable()?;
        validate::name("key", key)?;
        validate::unreserved("key", key)?;
        let scope = &self.session.scope;
        match scope.backend.reset(&scope.namespace, key).await? {
            ResetOutcome::Reset => Ok(true),
            ResetOutcome::NotFound => Ok(false),
            ResetOutcome::Held => Err(Error::new(
                ErrorKind::Held,
                format!(
                    "key {key:?} is held by a live lease; it can be reset once released or expired"
                ),
            )),
        }
    }

    /// Lists keys of this client's namespace, in key order, one page at a time.
    pub async fn list(&self, query: ListQuery) -> Result<ListPage> {
        self.session.check_usable()?;
        query.validate()?;
        let scope = &self.session.scope;
        scope.backend.list(&scope.namespace, &query).await
    }

    /// One read of what `accord top` shows: the first page of keys under `page`'s prefix (its
    /// limit, up to 1,000), the exact counts by state under that prefix, every group's members,
    /// every fleet's members and shards (with their holders and the unowned ones), every
    /// election's leader, and every stream with each named consumer's position and lag. One
    /// round trip on PostgreSQL (the statements pipelined on one connection), one transaction
    /// on SQLite. The counts read every key under the prefix: their cost grows with the keys.
    pub async fn snapshot(&self, page: ListQuery) -> Result<crate::NamespaceSnapshot> {
        crate::snapshot::read(&self.session, &page).await
    }

    /// Sends `payload` on `channel` to every listener, whatever its language or connection.
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        self.session.check_usable()?;
        validate::channel(channel)?;
        let backend = &self.session.scope.backend;
        validate::payload(payload, backend.max_payload())?;
        self.session.scope.notify(channel, payload).await
    }

    /// Starts receiving notifications on `channels`. Returns once every notification sent
    /// from then on will be delivered. Channels are not namespaced: a notification reaches the
    /// listeners of its channel in every namespace. Channels starting with `accord_` are
    /// accord's own and refused (`InvalidArgument`).
    pub async fn listen<I, S>(&self, channels: I) -> Result<Subscription>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.session.check_usable()?;
        let mut unique: Vec<String> = Vec::new();
        for channel in channels {
            let channel = channel.as_ref();
            validate::channel(channel)?;
            if !unique.iter().any(|c| c == channel) {
                unique.push(channel.to_string());
            }
        }
        if unique.is_empty() {
            return Err(Error::invalid("channels", "at least one channel is needed"));
        }
        Subscription::open(&self.session, unique).await
    }

    /// Appends `payload` (any UTF-8, up to 64 KiB) to `stream` and returns its seq: 1 for the
    /// stream's first event, one more for each after it, in the order the publishes committed.
    /// Concurrent publishes of this client share statements (one at a time, up to 1,000
    /// events each). On a `Connection` error the event may or may not have been stored.
    pub async fn publish(&self, stream: &str, payload: &str) -> Result<i64> {
        stream::publish(&self.session, stream, payload).await
    }

    /// Appends the payloads to `stream` in this order (at most 10,000 per call, a statement per
    /// 1,000) and returns their seqs, increasing.
    pub async fn publish_many<I, S>(&self, stream: &str, payloads: I) -> Result<Vec<i64>>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let payloads = payloads.into_iter().map(Into::into).collect();
        stream::publish_many(&self.session, stream, payloads).await
    }

    /// Reads `stream`: the stored events from where the options say, then live ones, each
    /// once and in seq order, across reconnects. Returns once events published from then on
    /// will be delivered. `Trimmed` when the asked-for start was deleted by retention.
    pub async fn subscribe(
        &self,
        stream: &str,
        options: SubscribeOptions,
    ) -> Result<StreamSubscription> {
        StreamSubscription::open(&self.session, stream, options).await
    }

    /// The stream's first and last stored seq and its retention rule.
    pub async fn stream_info(&self, stream: &str) -> Result<StreamInfo> {
        stream::stream_info(&self.session, stream).await
    }

    /// Sets how long `stream` keeps its events (replacing its rule; `StreamRetention::new()`
    /// keeps everything) and trims it now. Returns how many events the trim deleted.
    pub async fn set_stream_retention(
        &self,
        stream: &str,
        retention: StreamRetention,
    ) -> Result<u64> {
        stream::set_retention(&self.session, stream, retention).await
    }

    /// The channels this client's listening connection has LISTENed, as the server reports
    /// them (for tests and diagnostics).
    #[doc(hidden)]
    pub async fn listening_channels(&self) -> Result<Vec<String>> {
        self.session.check_usable()?;
        self.session.scope.backend.listening_channels().await
    }

    /// The store's revision up to which this client's watch has seen every event (etcd only;
    /// for tests and diagnostics).
    #[doc(hidden)]
    pub fn watched_revision(&self) -> Option<i64> {
        self.session.scope.backend.watched_through()
    }

    /// Closes the client: held leases are released (their lost signals fire), waiting
    /// acquires and subscriptions end with `Closed`, connections close. Afterwards `renew`,
    /// `release` and `done` on any lease of this client fail with `Closed`. Idempotent.
    pub async fn close(&self) {
        self.session.close().await;
    }
}
