//! The client: connects to a coordinator by URL and offers acquire, try_acquire, reset, list,
//! notify and listen. It owns the keepalive task and routes wake-ups to waiting acquires.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::backend::postgres::PgBackend;
use crate::backend::sqlite::SqliteBackend;
use crate::backend::{AcquireOutcome, AcquireRequest, DynBackend, LeaseRef, ResetOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::keepalive::{self, Keepalive};
use crate::lease::{Lease, LeaseCore};
use crate::options::{AcquireOptions, ClientOptions, ListPage, ListQuery, MAX_LIST_LIMIT};
use crate::subscription::{Dispatch, Subscription};
use crate::validate;

/// A waiting acquire re-checks at least this often even without a wake-up: a safety net for a
/// notification lost in a way the listening connection could not notice.
const MAX_WAIT_SLICE: Duration = Duration::from_secs(30);
/// When a concurrent change hid the holder's row, retry after about this long.
const RACE_RETRY: Duration = Duration::from_millis(20);
/// Wake a little after the holder's expiry so that the coordinator's clock has passed it.
const EXPIRY_SLACK: Duration = Duration::from_millis(5);

/// State shared by the client handles, its leases and subscriptions, and its background task.
pub(crate) struct Shared {
    pub backend: DynBackend,
    pub namespace: String,
    pub owner: String,
    pub ttl: Duration,
    pub pid: u32,
    pub closed: CancellationToken,
    pub keepalive: Keepalive,
    pub dispatch: Arc<Dispatch>,
    pub runtime: tokio::runtime::Handle,
}

impl Shared {
    /// G12: a client inherited through fork() shares sockets with its parent; using it would
    /// corrupt both, so it refuses clearly instead.
    pub fn check_fork(&self) -> Result<()> {
        let pid = std::process::id();
        if pid != self.pid {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "this accord client was created in process {} and cannot be used after fork() \
                     (in process {pid}); create a new client in the child process",
                    self.pid
                ),
            ));
        }
        Ok(())
    }

    /// True in a child process created by fork() after this client was made.
    pub fn is_forked(&self) -> bool {
        std::process::id() != self.pid
    }

    pub fn check_usable(&self) -> Result<()> {
        self.check_fork()?;
        if self.closed.is_cancelled() {
            return Err(Error::closed());
        }
        Ok(())
    }

    pub fn lease_ref<'a>(&'a self, key: &'a str, fence: i64) -> LeaseRef<'a> {
        LeaseRef {
            namespace: &self.namespace,
            key,
            owner: &self.owner,
            fence,
        }
    }

    /// Releases a grant nobody will use (fenced, so it never frees a newer grant). Failures
    /// only mean the key stays held until its expiry.
    pub async fn give_back(&self, key: &str, fence: i64) {
        if let Err(e) = self.backend.release(self.lease_ref(key, fence)).await {
            tracing::debug!(target: "accord", key, fence, error = %e, "give-back failed; the lease expires at its ttl");
        }
    }

    /// [`Shared::give_back`] on the client's runtime, for callers that cannot wait.
    pub fn give_back_later(self: &Arc<Self>, key: String, fence: i64) {
        let shared = self.clone();
        self.runtime
            .spawn(async move { shared.give_back(&key, fence).await });
    }

    /// Ends everything now: waiters and subscriptions see `Closed`, the keepalive stops.
    /// Returns the leases that were still held (to be released by an async close).
    fn shut(&self) -> Vec<Arc<LeaseCore>> {
        self.closed.cancel();
        self.dispatch.close();
        let held = self.keepalive.take_all();
        held.into_iter().filter(|l| l.end_with_close()).collect()
    }
}

struct ClientInner {
    shared: Arc<Shared>,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // Leases and subscriptions hold a client handle, so none is left here.
        if !self.shared.closed.is_cancelled() {
            self.shared.shut();
            self.shared.backend.close();
        }
    }
}

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
    inner: Arc<ClientInner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.namespace())
            .field("owner", &self.owner())
            .finish_non_exhaustive()
    }
}

fn default_owner() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

impl Client {
    /// Connects to the coordinator named by `url`:
    /// `postgres://user:password@host:port/db?sslmode=…` (or `postgresql://`, or a libpq
    /// `key=value` string). Applies pending migrations unless disabled.
    pub async fn connect(url: &str, options: ClientOptions) -> Result<Client> {
        validate::name("namespace", &options.namespace)?;
        if let Some(owner) = &options.owner {
            validate::name("owner", owner)?;
        }
        validate::ttl("ttl", options.ttl)?;
        validate::schema(&options.schema)?;
        if !(1..=64).contains(&options.pool_size) {
            return Err(Error::invalid(
                "pool_size",
                format!("{} is outside 1..=64", options.pool_size),
            ));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::Unsupported,
                "accord's Rust API must be called from within a tokio runtime",
            )
        })?;
        let dispatch = Arc::new(Dispatch::new(options.namespace.clone()));
        let backend: DynBackend = match scheme(url) {
            Scheme::Postgres => {
                Arc::new(PgBackend::connect(url, &options, dispatch.clone()).await?)
            }
            Scheme::Embedded => Arc::new(SqliteBackend::connect(url, dispatch.clone()).await?),
            Scheme::Unknown => {
                return Err(Error::invalid(
                    "url",
                    "expected postgres://…, postgresql://…, sqlite:///path or memory:",
                ))
            }
        };
        let shared = Arc::new(Shared {
            backend,
            namespace: options.namespace.clone(),
            owner: options.owner.clone().unwrap_or_else(default_owner),
            ttl: options.ttl,
            pid: std::process::id(),
            closed: CancellationToken::new(),
            keepalive: Keepalive::default(),
            dispatch,
            runtime,
        });
        tokio::spawn(keepalive::run(shared.clone()));
        Ok(Client {
            inner: Arc::new(ClientInner { shared }),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The owner recorded on this client's leases.
    pub fn owner(&self) -> &str {
        &self.inner.shared.owner
    }

    /// The namespace of this client's keys.
    pub fn namespace(&self) -> &str {
        &self.inner.shared.namespace
    }

    /// G12 for a binding's own waits (say, on a lease's lost signal): `Unsupported`, naming
    /// fork(), when called in a child process of the one that created this client.
    pub fn check_process(&self) -> Result<()> {
        self.shared().check_fork()
    }

    /// True once [`Client::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.shared.closed.is_cancelled()
    }

    /// Resolves once the client is closed (by [`Client::close`] or when its last handle went).
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.inner.shared.closed.clone().cancelled_owned()
    }

    /// Number of leases this client holds and keeps alive.
    pub fn held_count(&self) -> usize {
        self.inner.shared.keepalive.len()
    }

    /// Number of keepalive statements sent so far (one per tick, whatever the number of
    /// leases held).
    pub fn keepalive_statements(&self) -> u64 {
        self.inner
            .shared
            .keepalive
            .ticks
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until `key` is granted, then returns its lease. Fails with `Done` if the key is
    /// done, `Timeout` after the options' timeout, `Cancelled` when its cancel token fires,
    /// `Closed` when the client closes. In every failure nothing is left held.
    pub async fn acquire(&self, key: &str, options: AcquireOptions) -> Result<Lease> {
        match self.acquire_inner(key, options, true).await? {
            Some(lease) => Ok(lease),
            None => Err(Error::internal(
                "a waiting acquire returned without a lease",
            )),
        }
    }

    /// Tries once: the lease if `key` is free, `None` if it is held (by anyone, including
    /// another handle of this client: leases are not re-entrant), `Done` if it is done.
    pub async fn try_acquire(&self, key: &str, options: AcquireOptions) -> Result<Option<Lease>> {
        self.acquire_inner(key, options, false).await
    }

    async fn acquire_inner(
        &self,
        key: &str,
        options: AcquireOptions,
        wait: bool,
    ) -> Result<Option<Lease>> {
        let shared = self.shared();
        shared.check_usable()?;
        validate::name("key", key)?;
        let ttl = options.ttl.unwrap_or(shared.ttl);
        validate::ttl("ttl", ttl)?;
        let metadata = options
            .metadata
            .as_ref()
            .map(|m| validate::metadata("metadata", m))
            .transpose()?;
        let started = Instant::now();
        let deadline = options.timeout.map(|t| started + t);
        let cancel = options.cancel.unwrap_or_default();
        let attempt = Attempt {
            key: key.to_string(),
            ttl,
            metadata,
            token: rand::random(),
        };
        if !wait {
            return match self.attempt(&attempt).await? {
                (AcquireOutcome::Granted(g), sent) => self.adopt(&attempt, g, sent).await.map(Some),
                (AcquireOutcome::Done, _) => Err(Error::done(key)),
                (AcquireOutcome::Held { .. }, _) => Ok(None),
            };
        }
        let waiter = shared.dispatch.waiters.register(key);
        // Listen for releases before the first try, so that none between the try and the
        // wait is missed. Without the listening connection, waits end at the holder's expiry.
        // That wait is bounded by the acquire's own timeout: past it, one try decides.
        let listening_deadline = deadline.unwrap_or_else(|| started + MAX_WAIT_SLICE);
        tokio::select! {
            r = shared.backend.watch_wakeups() => if let Err(e) = r {
                tracing::warn!(target: "accord", error = %e, "waiting without release notifications");
            },
            _ = tokio::time::sleep_until(listening_deadline.into()) => {
                tracing::warn!(target: "accord", key, "the listening connection is not up yet; waiting without release notifications");
            }
            _ = cancel.cancelled() => return Err(Error::cancelled(&format!("acquire of {key:?}"))),
            _ = shared.closed.cancelled() => return Err(Error::closed()),
        }
        loop {
            let notified = waiter.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (outcome, sent) = self.attempt(&attempt).await?;
            let remaining = match outcome {
                AcquireOutcome::Granted(g) => {
                    let lease = self.adopt(&attempt, g, sent).await?;
                    if cancel.is_cancelled() {
                        let _ = lease.release().await;
                        return Err(Error::cancelled(&format!("acquire of {key:?}")));
                    }
                    return Ok(Some(lease));
                }
                AcquireOutcome::Done => return Err(Error::done(key)),
                AcquireOutcome::Held { remaining } => remaining,
            };
            let now = Instant::now();
            let retry_in = remaining
                .map(|r| r + EXPIRY_SLACK)
                .unwrap_or(RACE_RETRY)
                .min(MAX_WAIT_SLICE);
            let wake_at = match deadline {
                Some(d) if d <= now => return Err(timeout_error(key, started)),
                Some(d) => d.min(now + retry_in),
                None => now + retry_in,
            };
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake_at.into()) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(timeout_error(key, started));
                    }
                }
                _ = cancel.cancelled() => return Err(Error::cancelled(&format!("acquire of {key:?}"))),
                _ = shared.closed.cancelled() => return Err(Error::closed()),
            }
        }
    }

    /// Sends one acquire statement on a task of its own, so that if the caller's future is
    /// dropped mid-statement, a grant that arrives anyway is given back instead of left held.
    async fn attempt(&self, attempt: &Attempt) -> Result<(AcquireOutcome, Instant)> {
        let shared = self.shared().clone();
        let request = attempt.clone();
        let (reply, answer) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let sent = Instant::now();
            let outcome = shared
                .backend
                .acquire(&AcquireRequest {
                    namespace: &shared.namespace,
                    key: &request.key,
                    owner: &shared.owner,
                    ttl: request.ttl,
                    metadata: request.metadata.as_deref(),
                    attempt: request.token,
                })
                .await;
            // Unread (the caller is gone, before or after this send), the answer gives back
            // its grant when dropped.
            let _ = reply.send(Answer {
                outcome: Some(outcome.map(|o| (o, sent))),
                shared,
                key: request.key,
            });
        });
        let mut answer = answer
            .await
            .map_err(|_| Error::internal("the acquire task ended without an answer"))?;
        answer
            .outcome
            .take()
            .unwrap_or_else(|| Err(Error::internal("an acquire answer was read twice")))
    }

    /// Turns a grant into a lease kept alive by this client; a grant that arrives after the
    /// client closed is given back instead.
    async fn adopt(
        &self,
        attempt: &Attempt,
        g: crate::backend::Granted,
        sent: Instant,
    ) -> Result<Lease> {
        let shared = self.shared();
        let core = Arc::new(LeaseCore::new(
            attempt.key.clone(),
            g.fence,
            attempt.ttl,
            g.expires_at,
            g.metadata,
            sent,
        ));
        if !shared.keepalive.insert(core.clone(), &shared.closed) {
            shared.give_back(&attempt.key, g.fence).await;
            return Err(Error::closed());
        }
        Ok(Lease {
            client: self.clone(),
            core,
        })
    }

    /// Makes a done (or free) key unknown again, so that it can be acquired. `Ok(false)` if the
    /// key was not known; `Held` if a live lease holds it.
    pub async fn reset(&self, key: &str) -> Result<bool> {
        let shared = self.shared();
        shared.check_usable()?;
        validate::name("key", key)?;
        match shared.backend.reset(&shared.namespace, key).await? {
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

    /// Lists keys of this client's namespace, newest grant first, one page at a time.
    pub async fn list(&self, query: ListQuery) -> Result<ListPage> {
        let shared = self.shared();
        shared.check_usable()?;
        if let Some(prefix) = &query.prefix {
            if !prefix.is_empty() {
                validate::name("prefix", prefix)?;
            }
        }
        if let Some(m) = &query.metadata {
            validate::metadata("metadata filter", m)?;
        }
        if !(1..=MAX_LIST_LIMIT).contains(&query.limit) {
            return Err(Error::invalid(
                "limit",
                format!("{} is outside 1..={MAX_LIST_LIMIT}", query.limit),
            ));
        }
        shared.backend.list(&shared.namespace, &query).await
    }

    /// Sends `payload` on `channel` to every listener, whatever its language or connection.
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        let shared = self.shared();
        shared.check_usable()?;
        validate::channel(channel)?;
        validate::payload(payload, shared.backend.max_payload())?;
        shared.backend.notify(channel, payload).await
    }

    /// Starts receiving notifications on `channels`. Returns once every notification sent
    /// from then on will be delivered.
    pub async fn listen<I, S>(&self, channels: I) -> Result<Subscription>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.shared().check_usable()?;
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
        Subscription::open(self, unique).await
    }

    /// The channels this client's listening connection has LISTENed, as the server reports
    /// them (for tests and diagnostics).
    #[doc(hidden)]
    pub async fn listening_channels(&self) -> Result<Vec<String>> {
        self.shared().check_usable()?;
        self.shared().backend.listening_channels().await
    }

    /// Closes the client: held leases are released (their lost signals fire), waiting
    /// acquires and subscriptions end with `Closed`, connections close. Afterwards `renew`,
    /// `release` and `done` on any lease of this client fail with `Closed`. Idempotent.
    pub async fn close(&self) {
        let shared = self.shared();
        if shared.closed.is_cancelled() {
            return;
        }
        if shared.is_forked() {
            // The connections and leases are the parent's: leave them alone, end this copy.
            shared.closed.cancel();
            return;
        }
        let held = shared.shut();
        let releases = held
            .iter()
            .map(|lease| shared.give_back(&lease.key, lease.fence));
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            futures_util::future::join_all(releases),
        )
        .await;
        shared.backend.close();
    }
}

fn timeout_error(key: &str, started: Instant) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "timed out after {:?} waiting to acquire {key:?}",
            started.elapsed()
        ),
    )
}

/// The outcome of one acquire statement, on its way to the caller.
struct Answer {
    outcome: Option<Result<(AcquireOutcome, Instant)>>,
    shared: Arc<Shared>,
    key: String,
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(Ok((AcquireOutcome::Granted(g), _))) = &self.outcome {
            self.shared
                .give_back_later(std::mem::take(&mut self.key), g.fence);
        }
    }
}

#[derive(Clone)]
struct Attempt {
    key: String,
    ttl: Duration,
    metadata: Option<String>,
    token: i64,
}

enum Scheme {
    Postgres,
    Embedded,
    Unknown,
}

fn scheme(url: &str) -> Scheme {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Scheme::Postgres
    } else if url.starts_with("sqlite:") || url.starts_with("memory:") {
        Scheme::Embedded
    } else if !url.contains("://") && url.contains('=') {
        // libpq key=value form: host=… dbname=…
        Scheme::Postgres
    } else {
        Scheme::Unknown
    }
}
