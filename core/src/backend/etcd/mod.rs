//! The etcd v3 store (`etcd://host1:2379,host2:2379?prefix=/accord`), behind the cargo
//! feature `etcd`. Every operation is one or a few etcd transactions; the rules they apply to
//! what they read are `crate::rules`', as on the other stores. Modules:
//! - `url`: what the URL names;
//! - `secure`: TLS settings, and refusals (certificates, passwords) worded by URL parameter;
//! - `keys`: where the records live, and fences from create_revisions;
//! - `members`: which member calls go to, and which are down;
//! - `records`: the records' values, and one key read at one revision as the rules see it;
//! - `session`: the client's leases (one per ttl class) and their keep-alives;
//! - `known`: the rows this client last read or wrote, which a grant or ending assumes;
//! - `batch`: plain acquires and endings of one or many keys (nested transactions);
//! - `grant`: waiting acquires, renewals, resets and sweeps;
//! - `read`: list and holder;
//! - `watch`: notifications, and the wake-ups of waiters from deletes of what they wait behind;
//! - `pool`: work pools (offer, claim, counts);
//! - `stream`: durable streams (publish, read, retention, consumers' positions);
//! - `snapshot`: what `accord top` shows, read at one revision.

mod batch;
mod grant;
mod keys;
mod known;
mod members;
mod pool;
mod read;
mod records;
mod secure;
mod session;
mod snapshot;
mod stream;
mod url;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use etcd_client::{
    Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnResponse,
};

use self::batch::{EndItem, Ending};
use self::keys::{random_id, range_end, Layout};
use self::members::Members;
use self::records::Look;
use self::session::Leases;
use self::watch::Watcher;
use super::{
    AcquireItem, AcquireOutcome, AcquireRequest, Backend, BatchItem, ClaimRequest, Claimed,
    DoneItem, EventSink, Holder, LeaseRef, Renewed, ResetOutcome, SnapshotRows,
};
use crate::error::{Error, ErrorKind, Result};
use crate::metadata::Metadata;
use crate::options::{ClientOptions, ListPage, ListQuery, PoolCounts};
use crate::stats::{Counter, Recorder, Timer};

/// Wake-ups never leave this process (each client derives its own from its watch), so no
/// other role can forge one: the tag needs no secret. One format with the other stores.
const WAKE_SECRET: &str = "";
/// How long a connect to the cluster may take before it fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Optimistic transactions that lost to a concurrent writer are tried again this many times.
const TRIES: usize = 8;
/// The most operations one transaction carries (etcd's default `--max-txn-ops` is 128).
const MAX_TXN_OPS: usize = 100;

/// An etcd client error as accord's: unreachable members are `Connection` (the core retries),
/// the rest `Database`.
pub(crate) fn etcd_error(what: &str, e: etcd_client::Error) -> Error {
    let kind = match &e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            ErrorKind::Connection
        }
        // gRPC's Cancelled (1), DeadlineExceeded (4) and Unavailable (14): no member answered.
        etcd_client::Error::GRpcStatus(s) if matches!(s.code() as i32, 1 | 4 | 14) => {
            ErrorKind::Connection
        }
        // Unknown (2) from the client's side: the connection broke under the call (a member
        // killed), which the member did not answer (etcd's own errors say "etcdserver: …").
        etcd_client::Error::GRpcStatus(s)
            if s.code() as i32 == 2 && !s.message().starts_with("etcdserver") =>
        {
            ErrorKind::Connection
        }
        _ => ErrorKind::Database,
    };
    Error::new(kind, format!("{what}: etcd error: {e}")).with_source(e)
}

/// How long an operation that can be sent again waits out a member's failure (the test
/// cluster elects a new leader in 2.5 to 5 s) before its `Connection` error is the caller's.
const OUTAGE: Duration = Duration::from_secs(30);
/// Pause between sends of such an operation.
const OUTAGE_PAUSE: Duration = Duration::from_millis(100);

/// Runs `op` until it answers anything but a `Connection` error (for at most [`OUTAGE`]).
/// Only for operations that read before they write and recognise their own earlier write (a
/// grant by its attempt, a release or done by its fence, a renewal by its fence): a call whose
/// answer was lost with its member, or refused in an election ("leader changed", "no leader",
/// "request timed out"), is resolved by running it again, never by guessing its outcome.
async fn resolving<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let until = std::time::Instant::now() + OUTAGE;
    loop {
        match op().await {
            Err(e) if e.kind() == ErrorKind::Connection && std::time::Instant::now() < until => {
                tracing::debug!(target: "accord", error = %e, "etcd call failed with its member; reading again");
                tokio::time::sleep(OUTAGE_PAUSE).await;
            }
            answer => return answer,
        }
    }
}

/// Counts one call to etcd (a transaction, or a lease's grant, keep-alive or read) and its
/// time in the client's stats, as the other stores count statements.
pub(crate) async fn counted<T>(stats: &Recorder, call: impl std::future::Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let answer = call.await;
    stats.add(Counter::Statements, 1);
    stats.time(Timer::StatementTime, started.elapsed());
    answer
}

pub(crate) struct EtcdBackend {
    members: Arc<Members>,
    stats: Arc<Recorder>,
    layout: Layout,
    leases: Arc<Leases>,
    watcher: Arc<Watcher>,
    /// The stream heads this client last saw (`stream`): a publish compares with them first.
    known_heads: stream::KnownHeads,
    /// The rows this client last saw (`known`): a grant or an ending compares with them first.
    known: known::KnownRows,
}

impl EtcdBackend {
    pub async fn connect(
        url: &str,
        options: &ClientOptions,
        sink: Arc<dyn EventSink>,
        stats: Arc<Recorder>,
    ) -> Result<Self> {
        if options.listen_url.is_some() {
            return Err(Error::invalid(
                "listen_url",
                "is for PostgreSQL; etcd's watches share the client's connection",
            ));
        }
        let parsed = url::parse(url)?;
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(members::PING_AFTER, members::PING_TIMEOUT)
            .with_keep_alive_while_idle(false);
        if let Some(files) = &parsed.tls {
            connect = secure::with_tls(connect, files)?;
        }
        let refused = |e: etcd_client::Error| {
            secure::explain(&e, &parsed).unwrap_or_else(|| etcd_error("connect to etcd", e))
        };
        let layout = Layout::new(&parsed.prefix);
        let members = Members::connect(
            &parsed.endpoints,
            connect,
            layout.rows(""),
            parsed.user.clone(),
        )
        .await
        .map_err(refused)?;
        let watcher = Watcher::new(members.clone(), sink, layout.clone());
        let backend = EtcdBackend {
            leases: Arc::new(Leases::new(members.clone(), stats.clone())),
            members,
            stats,
            layout,
            watcher,
            known_heads: Default::default(),
            known: Default::default(),
        };
        // A read: an unreachable cluster fails the connect, not the first call.
        let key = backend.layout.rows("");
        backend
            .members
            .call(|mut client| {
                let key = key.clone();
                async move {
                    client
                        .get(key, Some(GetOptions::new().with_count_only()))
                        .await
                }
            })
            .await
            .map_err(refused)?;
        Ok(backend)
    }

    async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse> {
        let call = |mut client: etcd_client::Client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        };
        counted(&self.stats, self.members.call(call))
            .await
            .map_err(|e| etcd_error(what, e))
    }

    fn tag(&self, ns: &str, key: &str) -> String {
        crate::rules::wake_tag(WAKE_SECRET, ns, key)
    }

    /// One key's row, holder, shared holders and line, at one revision.
    async fn look(&self, ns: &str, key: &str) -> Result<Look> {
        let answer = self
            .txn("read a key", Txn::new().and_then(self.look_ops(ns, key)))
            .await?;
        let look = Look::read(revision(&answer), answer.op_responses())?;
        self.known.saw(&self.layout.row(ns, key), &look);
        Ok(look)
    }

    /// The reads of [`EtcdBackend::look`] (row, holder, shared holders, line), which
    /// [`Look::read`] reads back: also the failure branch of a transaction that compared what
    /// a look found, so that losing costs no second round trip.
    fn look_ops(&self, ns: &str, key: &str) -> Vec<TxnOp> {
        let by_creation = || GetOptions::new().with_sort(SortTarget::Create, SortOrder::Ascend);
        let shared = self.layout.shared(ns, key);
        let line = self.layout.line(ns, key);
        vec![
            TxnOp::get(self.layout.row(ns, key), None),
            TxnOp::get(self.layout.holder(ns, key), None),
            TxnOp::get(
                shared.as_bytes(),
                Some(by_creation().with_range(range_end(&shared))),
            ),
            TxnOp::get(
                line.as_bytes(),
                Some(by_creation().with_range(range_end(&line))),
            ),
        ]
    }
}

/// The fence, revision and metadata of a grant a transaction made.
fn revision(answer: &TxnResponse) -> i64 {
    answer.header().map_or(0, |h| h.revision())
}

fn expires_in(seconds: i64) -> DateTime<Utc> {
    Utc::now() + chrono::Duration::seconds(seconds)
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let item = AcquireItem {
            key: request.key.to_string(),
            ttl: request.ttl,
            metadata: request.metadata.map(str::to_string),
            attempt: request.attempt,
        };
        let (ns, owner) = (request.namespace, request.owner);
        let mut outcomes = self.acquire_batch(ns, owner, &[item]).await?;
        outcomes
            .pop()
            .ok_or_else(|| Error::internal("acquire: no outcome for its key"))
    }

    async fn acquire_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[AcquireItem],
    ) -> Result<Vec<AcquireOutcome>> {
        resolving(|| self.acquire_many(namespace, owner, items)).await
    }

    async fn acquire_queued(&self, request: &AcquireRequest<'_>) -> Result<AcquireOutcome> {
        resolving(|| self.acquire_in_line(request)).await
    }

    async fn leave_queue(
        &self,
        namespace: &str,
        key: &str,
        owner: &str,
        ticket: i64,
        _pass_turn: bool,
    ) -> Result<()> {
        // The waiters behind this one wait for its record's delete: no turn to pass by hand.
        resolving(|| self.leave(namespace, key, owner, ticket)).await
    }

    async fn release_shared(&self, lease: LeaseRef<'_>) -> Result<bool> {
        resolving(|| self.release_shared_one(lease)).await
    }

    async fn holder(&self, namespace: &str, key: &str) -> Result<Option<Holder>> {
        resolving(|| self.holder_of(namespace, key)).await
    }

    async fn renew(
        &self,
        lease: LeaseRef<'_>,
        ttl: Duration,
        metadata: Option<&str>,
    ) -> Result<Option<Renewed>> {
        resolving(|| self.renew_one(lease, ttl, metadata)).await
    }

    async fn renew_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[BatchItem<'_>],
    ) -> Result<Vec<(i64, DateTime<Utc>)>> {
        resolving(|| self.renew_many(namespace, owner, items)).await
    }

    async fn release(&self, lease: LeaseRef<'_>) -> Result<bool> {
        let item = (lease.key.to_string(), lease.fence);
        let released = self
            .release_batch(lease.namespace, lease.owner, &[item])
            .await?;
        Ok(!released.is_empty())
    }

    async fn done(&self, lease: LeaseRef<'_>, metadata: Option<&str>) -> Result<Option<Metadata>> {
        let item = DoneItem {
            key: lease.key.to_string(),
            fence: lease.fence,
            metadata: metadata.map(str::to_string),
        };
        let mut done = self
            .done_batch(lease.namespace, lease.owner, &[item])
            .await?;
        Ok(done.pop().map(|(_, metadata)| metadata))
    }

    async fn release_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[(String, i64)],
    ) -> Result<Vec<i64>> {
        let ending: Vec<EndItem> = items
            .iter()
            .map(|(key, fence)| EndItem {
                key,
                fence: *fence,
                ending: Ending::Release,
            })
            .collect();
        let ended = resolving(|| self.end_many(namespace, owner, &ending)).await?;
        Ok(items
            .iter()
            .zip(ended)
            .filter_map(|((_, fence), ended)| ended.map(|_| *fence))
            .collect())
    }

    async fn done_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[DoneItem],
    ) -> Result<Vec<(i64, Metadata)>> {
        let ending: Vec<EndItem> = items
            .iter()
            .map(|item| EndItem {
                key: &item.key,
                fence: item.fence,
                ending: Ending::Done(item.metadata.as_deref()),
            })
            .collect();
        let ended = resolving(|| self.end_many(namespace, owner, &ending)).await?;
        Ok(items
            .iter()
            .zip(ended)
            .filter_map(|(item, ended)| ended.map(|metadata| (item.fence, metadata)))
            .collect())
    }

    async fn reset(&self, namespace: &str, key: &str) -> Result<ResetOutcome> {
        resolving(|| self.reset_one(namespace, key)).await
    }

    async fn sweep(&self, namespace: &str, prefix: &str) -> Result<(u64, u64)> {
        // Dead waiters go with their session's lease: only member rows are left to sweep.
        Ok((resolving(|| self.sweep_rows(namespace, prefix)).await?, 0))
    }

    async fn list(&self, namespace: &str, query: &ListQuery) -> Result<ListPage> {
        resolving(|| self.list_page(namespace, query)).await
    }

    async fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        self.notify_batch(&[(channel, payload)]).await
    }

    async fn notify_batch(&self, notifications: &[(&str, &str)]) -> Result<()> {
        // Each notification is a record of its own (a burst on one channel is one
        // transaction: etcd refuses a key twice in one), on a lease that lets them go. A
        // lease granted twice (its answer lost with a member) leaves one unused, which expires.
        let lease = resolving(|| self.leases.retention()).await?;
        let batch = random_id();
        for (chunk, part) in notifications.chunks(MAX_TXN_OPS).zip(0..) {
            let key = |i: usize| {
                let (channel, _) = chunk[i];
                self.layout
                    .notification(channel, &format!("{batch}.{part}.{i}"))
            };
            let puts: Vec<TxnOp> = chunk
                .iter()
                .enumerate()
                .map(|(i, (_, payload))| {
                    TxnOp::put(key(i), *payload, Some(PutOptions::new().with_lease(lease)))
                })
                .collect();
            // Put only if its first record is absent: a chunk sent again after its answer was
            // lost with a member finds itself put, and is not heard twice.
            let first = key(0);
            let txn = Txn::new()
                .when([Compare::create_revision(
                    first.as_str(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then(puts);
            resolving(|| self.txn("notify", txn.clone())).await?;
        }
        Ok(())
    }

    async fn offer(
        &self,
        namespace: &str,
        pool: &str,
        keys: &[String],
        metadata: Option<&str>,
    ) -> Result<u64> {
        self.offer_keys(namespace, pool, keys, metadata).await
    }

    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claimed> {
        self.claim_keys(request).await
    }

    async fn counts(&self, namespace: &str, pool: &str) -> Result<PoolCounts> {
        resolving(|| self.pool_counts(namespace, pool)).await
    }

    async fn snapshot(
        &self,
        namespace: &str,
        page: &ListQuery,
        recipes: &ListQuery,
        streams: usize,
        waiter_keys: usize,
    ) -> Result<SnapshotRows> {
        let read = || self.snapshot_rows(namespace, page, recipes, streams, waiter_keys);
        resolving(read).await
    }

    fn max_payload(&self) -> usize {
        super::MAX_PAYLOAD
    }

    async fn listen(&self, channel: &str) -> Result<()> {
        *self
            .watcher
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(channel.to_string())
            .or_insert(0) += 1;
        self.watcher.start().await
    }

    async fn unlisten(&self, channel: &str) {
        let mut channels = self
            .watcher
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = channels.get_mut(channel) {
            *count -= 1;
            if *count == 0 {
                channels.remove(channel);
            }
        }
    }

    async fn watch_wakeups(&self) -> Result<()> {
        self.watcher.start().await
    }

    fn wake_secret(&self) -> Option<String> {
        Some(WAKE_SECRET.to_string())
    }

    async fn listening_channels(&self) -> Result<Vec<String>> {
        Ok(self
            .watcher
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect())
    }

    fn watched_through(&self) -> Option<i64> {
        self.watcher.watched_through()
    }

    fn close(&self) {
        self.watcher.shutdown.cancel();
        self.members.shutdown.cancel();
        // One revoke per ttl class ends every key of this client at once.
        let leases = self.leases.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { leases.revoke_all().await });
        }
    }
}
