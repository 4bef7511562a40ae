//! `Client` (sync, blocking with the GIL released) and `AsyncClient` (asyncio).

use accord::{AcquireOptions, CancellationToken, ClientOptions};
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyTuple};

use crate::convert;
use crate::election::{AsyncElection, Election};
use crate::errors::IntoPyResult;
use crate::fleet::{self, AsyncFleet, Fleet};
use crate::lease::{AsyncLease, Lease};
use crate::membership::{self, AsyncMember, AsyncMemberWatch, Member, MemberInfo, MemberWatch};
use crate::pool::{self, AsyncSemaphore, PoolCounts, Semaphore};
use crate::runtime::{self, aio, block_on, block_on_settled};
use crate::stats::Stats;
use crate::stream::{
    self, After, AsyncStreamSubscription, StreamInfo, StreamSubscription, DEFAULT_PAGE_SIZE,
};
use crate::subscription::{AsyncSubscription, Subscription};
use crate::types::{self, py_str_repr, ListPage};

#[allow(clippy::too_many_arguments)]
fn client_options(
    namespace: Option<String>,
    owner: Option<String>,
    ttl: Option<f64>,
    schema: Option<String>,
    pool_size: Option<i64>,
    connect_timeout: Option<f64>,
    statement_timeout: Option<f64>,
    migrate: bool,
    application_name: Option<String>,
    listen_url: Option<String>,
    prepare_statements: bool,
    close_on_sigterm: bool,
) -> PyResult<ClientOptions> {
    let mut options = ClientOptions::new()
        .migrate(migrate)
        .prepare_statements(prepare_statements)
        .close_on_sigterm(close_on_sigterm);
    if let Some(namespace) = namespace {
        options = options.namespace(namespace);
    }
    if let Some(owner) = owner {
        options = options.owner(owner);
    }
    if let Some(ttl) = convert::ttl("ttl", ttl)? {
        options = options.ttl(ttl);
    }
    if let Some(schema) = schema {
        options = options.schema(schema);
    }
    if let Some(size) = pool_size {
        options = options.pool_size(accord::limits::pool_size(size).py()?);
    }
    if let Some(t) = convert::timeout("connect_timeout", connect_timeout)? {
        options = options.connect_timeout(t);
    }
    if let Some(t) = convert::timeout("statement_timeout", statement_timeout)? {
        options = options.statement_timeout(t);
    }
    if let Some(name) = application_name {
        options = options.application_name(name);
    }
    if let Some(url) = listen_url {
        options = options.listen_url(url);
    }
    Ok(options)
}

/// The first connect in the main thread puts in the SIGTERM handler (`accord/_sigterm.py`
/// decides, `sigterm.rs` handles; not if the application has its own), so that a stopped
/// process gives back what it holds.
fn install_sigterm_handler(py: Python<'_>) -> PyResult<()> {
    py.import("accord._sigterm")?.call_method0("install")?;
    Ok(())
}

/// Closes every open client of this process (those connected with `close_on_sigterm=False`
/// aside) as `close()` does, and returns how many: what the SIGTERM handler runs, for programs
/// that handle the signal themselves. Never interrupted by signals (a close is not cut in half);
/// bounded as `close` is.
#[pyfunction]
pub fn close_all(py: Python<'_>) -> usize {
    let runtime = runtime::runtime();
    py.detach(|| runtime.block_on(accord::close_all()))
}

pub(crate) fn acquire_options(
    ttl: Option<f64>,
    timeout: Option<f64>,
    metadata: Option<&Bound<'_, PyAny>>,
) -> PyResult<AcquireOptions> {
    let mut options = AcquireOptions::new();
    if let Some(ttl) = convert::ttl("ttl", ttl)? {
        options = options.ttl(ttl);
    }
    if let Some(timeout) = convert::timeout("timeout", timeout)? {
        options = options.timeout(timeout);
    }
    if let Some(metadata) = convert::metadata("metadata", metadata)? {
        options = options.metadata(metadata);
    }
    Ok(options)
}

fn repr(class: &str, client: &accord::Client) -> String {
    format!(
        "<accord.{class} namespace={} owner={}{}>",
        py_str_repr(client.namespace()),
        py_str_repr(client.owner()),
        if client.is_closed() { " closed" } else { "" }
    )
}

/// A connection to a coordinator (sync API). Every call blocks with the GIL released; a
/// waiting `acquire` or subscription read answers Ctrl-C. Thread-safe: share one client
/// between threads. Close it (or use it as a context manager) to release what it holds.
#[pyclass(module = "accord", frozen)]
pub struct Client {
    inner: accord::Client,
}

#[pymethods]
impl Client {
    /// Connects to the coordinator named by `url` (`postgres://user:pw@host:port/db?sslmode=…`,
    /// `postgresql://…`, or a libpq `key=value` string). Durations are in seconds.
    #[staticmethod]
    #[pyo3(signature = (url, *, namespace=None, owner=None, ttl=None, schema=None,
        pool_size=None, connect_timeout=None, statement_timeout=None, migrate=true,
        application_name=None, listen_url=None, prepare_statements=true,
        close_on_sigterm=true))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        #[pyo3(from_py_with = convert::url)] url: String,
        #[pyo3(from_py_with = convert::namespace)] namespace: Option<String>,
        #[pyo3(from_py_with = convert::owner)] owner: Option<String>,
        ttl: Option<f64>,
        #[pyo3(from_py_with = convert::opt_schema)] schema: Option<String>,
        #[pyo3(from_py_with = convert::pool_size)] pool_size: Option<i64>,
        connect_timeout: Option<f64>,
        statement_timeout: Option<f64>,
        migrate: bool,
        #[pyo3(from_py_with = convert::application_name)] application_name: Option<String>,
        #[pyo3(from_py_with = convert::listen_url)] listen_url: Option<String>,
        prepare_statements: bool,
        close_on_sigterm: bool,
    ) -> PyResult<Client> {
        let options = client_options(
            namespace,
            owner,
            ttl,
            schema,
            pool_size,
            connect_timeout,
            statement_timeout,
            migrate,
            application_name,
            listen_url,
            prepare_statements,
            close_on_sigterm,
        )?;
        if close_on_sigterm {
            install_sigterm_handler(py)?;
        }
        let inner = block_on(py, accord::Client::connect(&url, options))?.py()?;
        Ok(Client { inner })
    }

    /// The owner recorded on this client's leases.
    #[getter]
    fn owner(&self) -> &str {
        self.inner.owner()
    }

    /// The namespace of this client's keys.
    #[getter]
    fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Number of leases this client holds and keeps alive now. A method, as `queued_count()`
    /// and `waiter_wakeups()`: counts that the client's background work changes between two
    /// reads are calls (like `queue.Queue.qsize()`); a record's fixed fields are properties.
    fn held_count(&self) -> usize {
        self.inner.held_count()
    }

    /// What this client did since it connected: counters and latency histograms (durations
    /// in seconds). Reads counters: never blocks, and answers after `close` too.
    fn stats(&self) -> Stats {
        self.inner.stats().into()
    }

    /// How many times this client's waiting acquires were woken by another client's release
    /// (a release wakes only the head of its key's line). For tests and diagnostics.
    fn waiter_wakeups(&self) -> u64 {
        self.inner.waiter_wakeups()
    }

    /// How many of this client's waiting acquires (and campaigns) hold a place in a key's line
    /// now. For tests and diagnostics: once it counts a waiter, later waiters are behind it.
    fn queued_count(&self) -> usize {
        self.inner.queued_count()
    }

    /// The election `name`: `campaign` to lead it, `leader` to read it, `observe` to follow it.
    /// Raises `InvalidArgument` for a bad name.
    fn election(&self, #[pyo3(from_py_with = convert::name)] name: String) -> PyResult<Election> {
        Ok(Election::new(self.inner.election(&name).py()?))
    }

    /// Waits until `key` is granted and returns its lease. Raises `Done` if the key is done,
    /// `Timeout` after `timeout` seconds, `Closed` if the client closes. Ctrl-C interrupts the
    /// wait; in every failure nothing is left held. Waiters are granted in arrival order.
    /// `shared=True` asks for a shared grant: any number of shared holders at once, or one
    /// exclusive holder; once an exclusive acquire waits, new shared ones wait behind it.
    #[pyo3(signature = (key, *, ttl=None, timeout=None, metadata=None, shared=false))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::key)] key: String,
        ttl: Option<f64>,
        timeout: Option<f64>,
        metadata: Option<&Bound<'_, PyAny>>,
        shared: bool,
    ) -> PyResult<Lease> {
        let cancel = CancellationToken::new();
        let options = acquire_options(ttl, timeout, metadata)?
            .shared(shared)
            .cancel(cancel.clone());
        let lease = pool::block_on_grants(py, &cancel, self.inner.acquire(&key, options))?;
        Ok(Lease::new(lease))
    }

    /// The lease if `key` is free, None at once if it is held (by anyone, this client
    /// included: leases are not re-entrant) or others wait for it. Raises `Done` if the key is
    /// done. `shared=True`: a shared grant, refused (None) while an exclusive holder holds the
    /// key or an exclusive acquire waits for it.
    #[pyo3(signature = (key, *, ttl=None, metadata=None, shared=false))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::key)] key: String,
        ttl: Option<f64>,
        metadata: Option<&Bound<'_, PyAny>>,
        shared: bool,
    ) -> PyResult<Option<Lease>> {
        let options = acquire_options(ttl, None, metadata)?.shared(shared);
        let acquired = block_on(py, self.inner.try_acquire(&key, options))?.py()?;
        Ok(acquired.map(Lease::new))
    }

    /// Offers `keys` (any iterable of str, each starting with `prefix`; at most
    /// `MAX_OFFER_KEYS` per call) to the work pool `prefix`: each becomes claimable by
    /// `claim`. Idempotent: a key already in a pool, held or done, stays as it is. `metadata`
    /// is the metadata of keys new to the coordinator. Returns how many keys joined.
    #[pyo3(signature = (prefix, keys, metadata=None))]
    fn offer(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::prefix)] prefix: String,
        keys: &Bound<'_, PyAny>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let keys = pool::keys(keys)?;
        let metadata = convert::metadata("metadata", metadata)?;
        block_on(py, self.inner.offer(&prefix, keys, metadata))?.py()
    }

    /// Claims up to `limit` (1 ..= `MAX_CLAIM_LIMIT`) free keys of the work pool `prefix`,
    /// oldest offer first; each is an ordinary `Lease`. An empty list at once when nothing is
    /// claimable, or, with a `timeout` (seconds), after waiting that long for a release, an
    /// offer or an expiry in the pool (not an error). Ctrl-C interrupts the wait; nothing is
    /// left held then.
    #[pyo3(signature = (prefix, limit=1, *, ttl=None, metadata=None, timeout=None))]
    fn claim(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::prefix)] prefix: String,
        #[pyo3(from_py_with = convert::limit)] limit: i64,
        ttl: Option<f64>,
        metadata: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Lease>> {
        let cancel = CancellationToken::new();
        let options = pool::claim_options(limit, ttl, timeout, metadata)?.cancel(cancel.clone());
        let leases = pool::block_on_grants(py, &cancel, self.inner.claim(&prefix, options))?;
        Ok(leases.into_iter().map(Lease::new).collect())
    }

    /// How many keys of the work pool `prefix` are free, held and done.
    fn counts(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::prefix)] prefix: String,
    ) -> PyResult<PoolCounts> {
        Ok(block_on(py, self.inner.counts(&prefix))?.py()?.into())
    }

    /// Opens the semaphore `name` with `limit` permits (1 ..= `MAX_PERMITS`), offering the
    /// permits it needs. Open every handle of a name with the same limit.
    fn semaphore(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::name)] name: String,
        #[pyo3(from_py_with = convert::limit)] limit: i64,
    ) -> PyResult<Semaphore> {
        let limit = accord::limits::permits(limit).py()?;
        let semaphore = block_on(py, self.inner.semaphore(&name, limit))?.py()?;
        Ok(Semaphore::new(semaphore))
    }

    /// Joins `group`: a member lease on `accord.group/<group>/<owner>`, kept by the client's
    /// keepalive. `metadata` is what other members see; `ttl` (seconds) how long after its
    /// last renewal a member whose process died leaves. Waits up to the ttl for a membership
    /// this owner still holds (a restarted process), then raises `Timeout`.
    #[pyo3(signature = (group, *, metadata=None, ttl=None))]
    fn join(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::group)] group: String,
        metadata: Option<&Bound<'_, PyAny>>,
        ttl: Option<f64>,
    ) -> PyResult<Member> {
        let options = membership::join_options(metadata, ttl)?;
        let member = block_on(py, self.inner.join(&group, options))?.py()?;
        Ok(Member::new(member))
    }

    /// The live members of `group`, oldest first, in one read.
    fn members(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::group)] group: String,
    ) -> PyResult<Vec<MemberInfo>> {
        Ok(membership::infos(
            block_on(py, self.inner.members(&group))?.py()?,
        ))
    }

    /// Watches `group`: iterate it for `Members` (the members now), then `Joined`, `Left` and
    /// `Updated` in order.
    fn watch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::group)] group: String,
    ) -> PyResult<MemberWatch> {
        let watch = block_on(py, self.inner.watch(&group))?.py()?;
        Ok(MemberWatch::new(watch))
    }

    /// Joins the fleet `name` and balances its shards with the other members in the
    /// background: `shards` (a count, 1 ..= `MAX_SHARDS`: shards "0" … "n-1") or `keys` (the
    /// shards' names). Durations in seconds: `ttl` of the member and shard leases (default:
    /// the client's), `period` of the rebalancing (default: ttl / 3), `handoff_timeout`
    /// (default: the ttl); at most `max_handoffs_per_period` hand-offs asked for per period
    /// (default: a quarter of the target share, at least 4). Iterate the fleet for its events.
    #[pyo3(signature = (name, shards=None, *, keys=None, ttl=None, period=None,
        max_handoffs_per_period=None, handoff_timeout=None, metadata=None))]
    #[allow(clippy::too_many_arguments)]
    fn fleet(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::name)] name: String,
        #[pyo3(from_py_with = convert::shards)] shards: Option<i64>,
        keys: Option<&Bound<'_, PyAny>>,
        ttl: Option<f64>,
        period: Option<f64>,
        #[pyo3(from_py_with = convert::max_handoffs_per_period)] max_handoffs_per_period: Option<
            i64,
        >,
        handoff_timeout: Option<f64>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Fleet> {
        let options = fleet::fleet_options(
            shards,
            keys,
            ttl,
            period,
            max_handoffs_per_period,
            handoff_timeout,
            metadata,
        )?;
        let fleet = block_on(py, self.inner.fleet(&name, options))?.py()?;
        Ok(Fleet::new(fleet))
    }

    /// Makes a done (or free) key unknown again, so that it can be acquired. Returns False if
    /// the key was not known; raises `Held` if a live lease holds it.
    fn reset(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::key)] key: String,
    ) -> PyResult<bool> {
        block_on(py, self.inner.reset(&key))?.py()
    }

    /// One page of this namespace's keys, in key order. `state` is "held", "free",
    /// "done" or "all"; `metadata` keeps keys whose metadata contains it; `prefix` matches
    /// literally.
    #[pyo3(signature = (prefix=None, *, state=None, metadata=None, limit=100, cursor=None))]
    fn list(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::opt_prefix)] prefix: Option<String>,
        #[pyo3(from_py_with = convert::state)] state: Option<String>,
        metadata: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = convert::limit)] limit: i64,
        #[pyo3(from_py_with = convert::cursor)] cursor: Option<String>,
    ) -> PyResult<ListPage> {
        let query = types::list_query(prefix, state.as_deref(), metadata, limit, cursor)?;
        let page = block_on(py, self.inner.list(query))?.py()?;
        Ok(page.into())
    }

    /// Sends `payload` on `channel` to every listener (PostgreSQL NOTIFY).
    #[pyo3(signature = (channel, payload=String::new()), text_signature = "($self, channel, payload='')")]
    fn notify(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::channel)] channel: String,
        #[pyo3(from_py_with = convert::payload)] payload: String,
    ) -> PyResult<()> {
        block_on(py, self.inner.notify(&channel, &payload))?.py()
    }

    /// Starts receiving notifications on `channels`; returns once every notification sent
    /// from then on will be delivered.
    #[pyo3(signature = (*channels))]
    fn listen(&self, py: Python<'_>, channels: &Bound<'_, PyTuple>) -> PyResult<Subscription> {
        let channels = types::channels(channels)?;
        let subscription = block_on(py, self.inner.listen(channels))?.py()?;
        Ok(Subscription::new(subscription))
    }

    /// Appends `payload` (any str, NUL included, up to 64 KiB as UTF-8) to `stream` and
    /// returns its seq: 1 for the stream's first event, one more for each after it, in commit
    /// order. On a `Connection` error the event may or may not have been stored.
    fn publish(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
        #[pyo3(from_py_with = convert::payload)] payload: String,
    ) -> PyResult<i64> {
        block_on(py, self.inner.publish(&stream, &payload))?.py()
    }

    /// Appends `payloads` (any iterable of str, at most 10,000) to `stream` in this order and
    /// returns their seqs, increasing.
    fn publish_many(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
        payloads: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<i64>> {
        let payloads = convert::strings("payloads", "payload", payloads)?;
        block_on(py, self.inner.publish_many(&stream, payloads))?.py()
    }

    /// Reads `stream`: the stored events from `after` ("latest": only events published from
    /// now on; "earliest": the oldest the stream still holds; a seq: the events after it), then
    /// live ones, each once and in seq order, across reconnects. A named `consumer` resumes
    /// after its last `ack` (unless `after` is a seq). `page_size` events are read at once
    /// (1 ..= 1,000). Returns once events published from then on will be delivered. Raises
    /// `Trimmed` when the asked-for start was deleted by retention.
    #[pyo3(signature = (stream, *, after=After::LATEST, consumer=None,
        page_size=DEFAULT_PAGE_SIZE),
        text_signature = "($self, stream, *, after='latest', consumer=None, page_size=100)")]
    fn subscribe(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
        after: After,
        #[pyo3(from_py_with = convert::consumer)] consumer: Option<String>,
        #[pyo3(from_py_with = convert::page_size)] page_size: i64,
    ) -> PyResult<StreamSubscription> {
        let options = stream::subscribe_options(after, consumer, page_size)?;
        let subscription = block_on(py, self.inner.subscribe(&stream, options))?.py()?;
        Ok(StreamSubscription::new(subscription))
    }

    /// The stream's first and last stored seq and its retention rule.
    fn stream_info(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
    ) -> PyResult<StreamInfo> {
        Ok(block_on(py, self.inner.stream_info(&stream))?.py()?.into())
    }

    /// Sets how long `stream` keeps its events, replacing its rule: at most `max_len` of the
    /// newest, none older than `max_age` seconds (None: no bound; both None: keep everything).
    /// Trims now and returns how many events that deleted.
    #[pyo3(signature = (stream, *, max_len=None, max_age=None))]
    fn set_stream_retention(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
        #[pyo3(from_py_with = convert::max_len)] max_len: Option<i64>,
        max_age: Option<f64>,
    ) -> PyResult<u64> {
        let retention = stream::retention(max_len, max_age)?;
        block_on(py, self.inner.set_stream_retention(&stream, retention))?.py()
    }

    /// The channels the listening connection has LISTENed, as the server reports them (for
    /// tests and diagnostics).
    fn _listening_channels(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        block_on(py, self.inner.listening_channels())?.py()
    }

    /// Releases held leases (their `lost` fires), ends waiting acquires and subscriptions
    /// with `Closed`, closes connections; afterwards `renew`, `release` and `done` of any of
    /// its leases raise `Closed`. Idempotent. In a child process made by fork() it does
    /// nothing: the client is the parent's.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        block_on_settled(py, self.inner.close())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        repr("Client", &self.inner)
    }
}

/// A connection to a coordinator (asyncio API): the same calls as `Client`, as coroutines.
#[pyclass(module = "accord", frozen)]
pub struct AsyncClient {
    inner: accord::Client,
}

/// `accord._aio.Opening(start)`: awaitable, or an async context manager.
pub(crate) fn opening<'py, F>(py: Python<'py>, start: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Fn(Python<'_>) -> PyResult<Py<PyAny>> + Send + Sync + 'static,
{
    let start = PyCFunction::new_closure(py, None, None, move |args, _kwargs| start(args.py()))?;
    aio(py, "Opening")?.call1((start,))
}

#[pymethods]
impl AsyncClient {
    /// Connects to the coordinator named by `url`; see `Client.connect`. Await it, or use it
    /// with `async with` to close the client at the end of the block.
    #[staticmethod]
    #[pyo3(signature = (url, *, namespace=None, owner=None, ttl=None, schema=None,
        pool_size=None, connect_timeout=None, statement_timeout=None, migrate=true,
        application_name=None, listen_url=None, prepare_statements=true,
        close_on_sigterm=true))]
    #[allow(clippy::too_many_arguments)]
    fn connect<'py>(
        py: Python<'py>,
        #[pyo3(from_py_with = convert::url)] url: String,
        #[pyo3(from_py_with = convert::namespace)] namespace: Option<String>,
        #[pyo3(from_py_with = convert::owner)] owner: Option<String>,
        ttl: Option<f64>,
        #[pyo3(from_py_with = convert::opt_schema)] schema: Option<String>,
        #[pyo3(from_py_with = convert::pool_size)] pool_size: Option<i64>,
        connect_timeout: Option<f64>,
        statement_timeout: Option<f64>,
        migrate: bool,
        #[pyo3(from_py_with = convert::application_name)] application_name: Option<String>,
        #[pyo3(from_py_with = convert::listen_url)] listen_url: Option<String>,
        prepare_statements: bool,
        close_on_sigterm: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = client_options(
            namespace,
            owner,
            ttl,
            schema,
            pool_size,
            connect_timeout,
            statement_timeout,
            migrate,
            application_name,
            listen_url,
            prepare_statements,
            close_on_sigterm,
        )?;
        if close_on_sigterm {
            install_sigterm_handler(py)?;
        }
        opening(py, move |py| {
            let (url, options) = (url.clone(), options.clone());
            let connecting = runtime::future_into_py(py, async move {
                let inner = accord::Client::connect(&url, options).await.py()?;
                Ok(AsyncClient { inner })
            })?;
            Ok(connecting.unbind())
        })
    }

    /// The owner recorded on this client's leases.
    #[getter]
    fn owner(&self) -> &str {
        self.inner.owner()
    }

    /// The namespace of this client's keys.
    #[getter]
    fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Number of leases this client holds and keeps alive now. A method, as `queued_count()`
    /// and `waiter_wakeups()`: counts that the client's background work changes between two
    /// reads are calls (like `queue.Queue.qsize()`); a record's fixed fields are properties.
    fn held_count(&self) -> usize {
        self.inner.held_count()
    }

    /// What this client did since it connected: counters and latency histograms (durations
    /// in seconds). Reads counters: never blocks, and answers after `close` too.
    fn stats(&self) -> Stats {
        self.inner.stats().into()
    }

    /// How many times this client's waiting acquires were woken by another client's release
    /// (a release wakes only the head of its key's line). For tests and diagnostics.
    fn waiter_wakeups(&self) -> u64 {
        self.inner.waiter_wakeups()
    }

    /// How many of this client's waiting acquires (and campaigns) hold a place in a key's line
    /// now. For tests and diagnostics: once it counts a waiter, later waiters are behind it.
    fn queued_count(&self) -> usize {
        self.inner.queued_count()
    }

    /// The election `name` (returned at once: opening one does no I/O); see
    /// `Client.election`. Raises `InvalidArgument` for a bad name.
    fn election(
        &self,
        #[pyo3(from_py_with = convert::name)] name: String,
    ) -> PyResult<AsyncElection> {
        Ok(AsyncElection::new(self.inner.election(&name).py()?))
    }

    /// Waits until `key` is granted and returns its lease: await it, or use it with
    /// `async with`. Raises `Done`, `Timeout` (after `timeout` seconds) or `Closed`. A
    /// cancelled acquire raises `CancelledError` only once nothing it may have been granted
    /// is held. `shared=True`: a shared grant; see `Client.acquire`.
    #[pyo3(signature = (key, *, ttl=None, timeout=None, metadata=None, shared=false))]
    #[allow(clippy::too_many_arguments)]
    fn acquire<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::key)] key: String,
        ttl: Option<f64>,
        timeout: Option<f64>,
        metadata: Option<&Bound<'py, PyAny>>,
        shared: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = acquire_options(ttl, timeout, metadata)?.shared(shared);
        let client = self.inner.clone();
        opening(py, move |py| {
            let cancel = CancellationToken::new();
            let (client, key) = (client.clone(), key.clone());
            let options = options.clone().cancel(cancel.clone());
            let acquiring = runtime::future_into_py(py, async move {
                client
                    .acquire(&key, options)
                    .await
                    .py()
                    .map(AsyncLease::new)
            })?;
            let cancel = PyCFunction::new_closure(py, None, None, move |_args, _kwargs| {
                cancel.cancel();
            })?;
            Ok(aio(py, "settle")?.call1((acquiring, cancel))?.unbind())
        })
    }

    /// The lease if `key` is free, None at once if it is held. Raises `Done` if it is done.
    /// `shared=True`: a shared grant; see `Client.try_acquire`.
    #[pyo3(signature = (key, *, ttl=None, metadata=None, shared=false))]
    fn try_acquire<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::key)] key: String,
        ttl: Option<f64>,
        metadata: Option<&Bound<'py, PyAny>>,
        shared: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = acquire_options(ttl, None, metadata)?.shared(shared);
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            let acquired = client.try_acquire(&key, options).await.py()?;
            Ok(acquired.map(AsyncLease::new))
        })
    }

    /// Offers `keys` to the work pool `prefix`; returns how many joined. See `Client.offer`.
    #[pyo3(signature = (prefix, keys, metadata=None))]
    fn offer<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::prefix)] prefix: String,
        keys: &Bound<'py, PyAny>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let keys = pool::keys(keys)?;
        let metadata = convert::metadata("metadata", metadata)?;
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            client.offer(&prefix, keys, metadata).await.py()
        })
    }

    /// Claims up to `limit` free keys of the work pool `prefix` as `AsyncLease`s; see
    /// `Client.claim`. A cancelled claim raises `CancelledError` only once nothing it may have
    /// been granted is held.
    #[pyo3(signature = (prefix, limit=1, *, ttl=None, metadata=None, timeout=None))]
    fn claim<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::prefix)] prefix: String,
        #[pyo3(from_py_with = convert::limit)] limit: i64,
        ttl: Option<f64>,
        metadata: Option<&Bound<'py, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cancel = CancellationToken::new();
        let options = pool::claim_options(limit, ttl, timeout, metadata)?.cancel(cancel.clone());
        let client = self.inner.clone();
        // Nothing starts until the coroutine is awaited.
        let start = PyCFunction::new_closure(py, None, None, move |args, _kwargs| {
            let (client, prefix, options) = (client.clone(), prefix.clone(), options.clone());
            let claiming = runtime::future_into_py(args.py(), async move {
                let leases = client.claim(&prefix, options).await.py()?;
                Ok(leases.into_iter().map(AsyncLease::new).collect::<Vec<_>>())
            })?;
            PyResult::Ok(claiming.unbind())
        })?;
        let cancel = PyCFunction::new_closure(py, None, None, move |_args, _kwargs| {
            cancel.cancel();
        })?;
        aio(py, "settle_started")?.call1((start, cancel))
    }

    /// How many keys of the work pool `prefix` are free, held and done.
    fn counts<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::prefix)] prefix: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            Ok(PoolCounts::from(client.counts(&prefix).await.py()?))
        })
    }

    /// Opens the semaphore `name` with `limit` permits; see `Client.semaphore`.
    fn semaphore<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::name)] name: String,
        #[pyo3(from_py_with = convert::limit)] limit: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limit = accord::limits::permits(limit).py()?;
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            Ok(AsyncSemaphore::new(
                client.semaphore(&name, limit).await.py()?,
            ))
        })
    }

    /// Joins `group`; see `Client.join`. Await it, or use it with `async with` to leave at
    /// the end of the block.
    #[pyo3(signature = (group, *, metadata=None, ttl=None))]
    fn join<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::group)] group: String,
        metadata: Option<&Bound<'py, PyAny>>,
        ttl: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = membership::join_options(metadata, ttl)?;
        let client = self.inner.clone();
        opening(py, move |py| {
            let (client, group, options) = (client.clone(), group.clone(), options.clone());
            let joining = runtime::future_into_py(py, async move {
                let member = client.join(&group, options).await.py()?;
                Ok(AsyncMember::new(member))
            })?;
            Ok(joining.unbind())
        })
    }

    /// The live members of `group`, oldest first, in one read.
    fn members<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::group)] group: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            Ok(membership::infos(client.members(&group).await.py()?))
        })
    }

    /// Watches `group`; see `Client.watch`. Await it, or use it with `async with` to close the
    /// watch at the end of the block.
    fn watch<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::group)] group: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        opening(py, move |py| {
            let (client, group) = (client.clone(), group.clone());
            let watching = runtime::future_into_py(py, async move {
                let watch = client.watch(&group).await.py()?;
                Ok(AsyncMemberWatch::new(watch))
            })?;
            Ok(watching.unbind())
        })
    }

    /// Joins the fleet `name`; see `Client.fleet`. Await it, or use it with `async with` to
    /// close the fleet at the end of the block.
    #[pyo3(signature = (name, shards=None, *, keys=None, ttl=None, period=None,
        max_handoffs_per_period=None, handoff_timeout=None, metadata=None))]
    #[allow(clippy::too_many_arguments)]
    fn fleet<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::name)] name: String,
        #[pyo3(from_py_with = convert::shards)] shards: Option<i64>,
        keys: Option<&Bound<'py, PyAny>>,
        ttl: Option<f64>,
        period: Option<f64>,
        #[pyo3(from_py_with = convert::max_handoffs_per_period)] max_handoffs_per_period: Option<
            i64,
        >,
        handoff_timeout: Option<f64>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = fleet::fleet_options(
            shards,
            keys,
            ttl,
            period,
            max_handoffs_per_period,
            handoff_timeout,
            metadata,
        )?;
        let client = self.inner.clone();
        opening(py, move |py| {
            let (client, name, options) = (client.clone(), name.clone(), options.clone());
            let opening = runtime::future_into_py(py, async move {
                let fleet = client.fleet(&name, options).await.py()?;
                Ok(AsyncFleet::new(fleet))
            })?;
            Ok(opening.unbind())
        })
    }

    /// Makes a done (or free) key unknown again. False if the key was not known; raises
    /// `Held` if a live lease holds it.
    fn reset<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::key)] key: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        runtime::future_into_py(py, async move { client.reset(&key).await.py() })
    }

    /// One page of this namespace's keys, in key order; see `Client.list`.
    #[pyo3(signature = (prefix=None, *, state=None, metadata=None, limit=100, cursor=None))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::opt_prefix)] prefix: Option<String>,
        #[pyo3(from_py_with = convert::state)] state: Option<String>,
        metadata: Option<&Bound<'py, PyAny>>,
        #[pyo3(from_py_with = convert::limit)] limit: i64,
        #[pyo3(from_py_with = convert::cursor)] cursor: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let query = types::list_query(prefix, state.as_deref(), metadata, limit, cursor)?;
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            Ok(ListPage::from(client.list(query).await.py()?))
        })
    }

    /// Sends `payload` on `channel` to every listener (PostgreSQL NOTIFY).
    #[pyo3(signature = (channel, payload=String::new()), text_signature = "($self, channel, payload='')")]
    fn notify<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::channel)] channel: String,
        #[pyo3(from_py_with = convert::payload)] payload: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        runtime::future_into_py(
            py,
            async move { client.notify(&channel, &payload).await.py() },
        )
    }

    /// Starts receiving notifications on `channels`: await it, or use it with `async with`
    /// to close the subscription at the end of the block.
    #[pyo3(signature = (*channels))]
    fn listen<'py>(
        &self,
        py: Python<'py>,
        channels: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let channels = types::channels(channels)?;
        let client = self.inner.clone();
        opening(py, move |py| {
            let (client, channels) = (client.clone(), channels.clone());
            let listening = runtime::future_into_py(py, async move {
                let subscription = client.listen(channels).await.py()?;
                Ok(AsyncSubscription::new(subscription))
            })?;
            Ok(listening.unbind())
        })
    }

    /// Appends `payload` to `stream` and returns its seq; see `Client.publish`. Concurrent
    /// publishes of one client share statements.
    fn publish<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
        #[pyo3(from_py_with = convert::payload)] payload: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        runtime::future_into_py(
            py,
            async move { client.publish(&stream, &payload).await.py() },
        )
    }

    /// Appends `payloads` to `stream` in this order and returns their seqs; see
    /// `Client.publish_many`.
    fn publish_many<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
        payloads: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let payloads = convert::strings("payloads", "payload", payloads)?;
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            client.publish_many(&stream, payloads).await.py()
        })
    }

    /// Reads `stream`; see `Client.subscribe`. Await it, or use it with `async with` to close
    /// the subscription at the end of the block.
    #[pyo3(signature = (stream, *, after=After::LATEST, consumer=None,
        page_size=DEFAULT_PAGE_SIZE),
        text_signature = "($self, stream, *, after='latest', consumer=None, page_size=100)")]
    fn subscribe<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
        after: After,
        #[pyo3(from_py_with = convert::consumer)] consumer: Option<String>,
        #[pyo3(from_py_with = convert::page_size)] page_size: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = stream::subscribe_options(after, consumer, page_size)?;
        let client = self.inner.clone();
        opening(py, move |py| {
            let (client, stream, options) = (client.clone(), stream.clone(), options.clone());
            let subscribing = runtime::future_into_py(py, async move {
                let subscription = client.subscribe(&stream, options).await.py()?;
                Ok(AsyncStreamSubscription::new(subscription))
            })?;
            Ok(subscribing.unbind())
        })
    }

    /// The stream's first and last stored seq and its retention rule.
    fn stream_info<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            Ok(StreamInfo::from(client.stream_info(&stream).await.py()?))
        })
    }

    /// Sets how long `stream` keeps its events and trims it now; see
    /// `Client.set_stream_retention`.
    #[pyo3(signature = (stream, *, max_len=None, max_age=None))]
    fn set_stream_retention<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::stream)] stream: String,
        #[pyo3(from_py_with = convert::max_len)] max_len: Option<i64>,
        max_age: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let retention = stream::retention(max_len, max_age)?;
        let client = self.inner.clone();
        runtime::future_into_py(py, async move {
            client.set_stream_retention(&stream, retention).await.py()
        })
    }

    /// The channels the listening connection has LISTENed, as the server reports them (for
    /// tests and diagnostics).
    fn _listening_channels<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        runtime::future_into_py(py, async move { client.listening_channels().await.py() })
    }

    /// Releases held leases (their `lost` completes), ends waiting acquires and subscriptions
    /// with `Closed`, closes connections; afterwards `renew`, `release` and `done` of any of
    /// its leases raise `Closed`. Idempotent; runs to its end even if the caller is cancelled.
    /// In a child process made by fork() it does nothing: the client is the parent's.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        runtime::detached_into_py(py, async move {
            client.close().await;
            Ok(())
        })
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio(slf.py(), "ready")?.call1((slf,))
    }

    #[pyo3(signature = (*_args))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio(py, "exit_closing")?.call1((self.close(py)?,))
    }

    fn __repr__(&self) -> String {
        repr("AsyncClient", &self.inner)
    }
}
