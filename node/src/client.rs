//! `connect` and `Client`: acquire, tryAcquire, offer, claim, counts, semaphore, join, members,
//! watch, fleet, election, reset, list, notify, listen, publish, publishMany, subscribe,
//! streamInfo, setStreamRetention, close, and the waiting diagnostics.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

use crate::convert::{
    call_method, integer, opt_bool, opt_integer, opt_metadata, opt_millis, opt_object, opt_options,
    opt_string, opt_ttl, property, settle, settle_map, settle_ok, string, strings,
};
use crate::election::Election;
use crate::error::{Failure, Outcome};
use crate::fleet::{parse_fleet, Fleet};
use crate::lease::Lease;
use crate::membership::{member_infos, Member, MemberInfo, MemberWatch};
use crate::semaphore::Semaphore;
use crate::stats::Stats;
use crate::stream::{parse_retention, parse_subscribe, StreamInfo, StreamSubscription};
use crate::subscription::Subscription;

/// The properties of `ClientOptions`, `AcquireOptions`, … (each interface's fields, in order):
/// any other is refused, naming it. `node/test/api.test.js` checks each list against
/// `index.d.ts`.
pub(crate) const CLIENT_OPTIONS: &[&str] = &[
    "namespace",
    "owner",
    "ttl",
    "schema",
    "poolSize",
    "connectTimeout",
    "statementTimeout",
    "migrate",
    "applicationName",
    "listenUrl",
    "prepareStatements",
    "closeOnSigterm",
];
pub(crate) const ACQUIRE_OPTIONS: &[&str] = &["ttl", "timeout", "metadata", "signal", "shared"];
pub(crate) const TRY_ACQUIRE_OPTIONS: &[&str] = &["ttl", "metadata", "shared"];
pub(crate) const CLAIM_OPTIONS: &[&str] = &["limit", "ttl", "timeout", "metadata", "signal"];
pub(crate) const LIST_QUERY: &[&str] = &["prefix", "state", "metadata", "limit", "cursor"];
pub(crate) const JOIN_OPTIONS: &[&str] = &["metadata", "ttl"];

/// Options of `connect()`. Every one has a default; durations are in milliseconds.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct ClientOptions {
    /// Keys live in a namespace (default `"default"`); clients of different namespaces never
    /// contend.
    pub namespace: Option<String>,
    /// The owner recorded on every lease (default: `host-pid-random`). Two clients with the
    /// same owner still exclude each other: leases are not re-entrant.
    pub owner: Option<String>,
    /// Default lease ttl (default 30000; 100 ..= 86400000).
    pub ttl: Option<f64>,
    /// The database schema holding accord's tables (default `"accord"`).
    pub schema: Option<String>,
    /// Number of pipelined command connections (default 2; 1 ..= 64). One more connection
    /// listens for notifications.
    pub pool_size: Option<u32>,
    /// How long to wait for a connection to the coordinator (default 10000).
    pub connect_timeout: Option<f64>,
    /// How long one statement may take before its connection is considered broken
    /// (default 10000).
    pub statement_timeout: Option<f64>,
    /// Apply pending schema migrations at connect (default true).
    pub migrate: Option<bool>,
    /// `application_name` shown in `pg_stat_activity` (default `"accord"`).
    pub application_name: Option<String>,
    /// Where the listening connection goes (PostgreSQL only; default: the client's URL): a
    /// direct or session-pooled URL of the same database, when commands go through a PgBouncer
    /// in transaction mode, where LISTEN cannot receive. Without it there, `listen` fails with
    /// `ACCORD_CONNECTION` naming `listen_url`. Refused (`ACCORD_INVALID_ARGUMENT`) on the
    /// embedded store.
    pub listen_url: Option<String>,
    /// Whether each command connection prepares accord's statements once (default true).
    /// `false` sends each statement with its text (still one round trip, planned at every
    /// call): needed behind a PgBouncer in transaction mode before 1.21 (or with
    /// `max_prepared_statements = 0`), where a statement prepared on one server connection is
    /// missing on the next, and another process's statement of the same name may be found.
    pub prepare_statements: Option<bool>,
    /// Whether SIGTERM (what Docker and Kubernetes send) closes this client (default true):
    /// the first client connected with it on adds a `process.once('SIGTERM')` listener that
    /// closes every such client (`closeAll()`: leases released, fleets and memberships left),
    /// then ends the process with SIGTERM as Node's default does, unless the application
    /// listens for SIGTERM too (its listener then decides). `false` leaves this client out.
    pub close_on_sigterm: Option<bool>,
}

/// Options of `client.acquire()`. Durations are in milliseconds.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct AcquireOptions {
    /// Lease ttl for this acquisition (default: the client's).
    pub ttl: Option<f64>,
    /// Give up waiting after this long with `ACCORD_TIMEOUT` (default: wait until granted).
    pub timeout: Option<f64>,
    /// Merged into the key's stored metadata on grant.
    #[napi(ts_type = "Record<string, unknown>")]
    pub metadata: Option<()>,
    /// Aborting it ends a waiting acquire with `ACCORD_CANCELLED`, leaving nothing held.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<()>,
    /// A shared grant (default `false`: exclusive): any number of shared holders at once, or
    /// one exclusive holder. Once an exclusive acquire waits, new shared acquires wait behind
    /// it. A shared lease renews, releases and is fenced as any other, but cannot change the
    /// key's metadata or mark it done.
    pub shared: Option<bool>,
}

/// Options of `client.tryAcquire()`.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct TryAcquireOptions {
    /// Lease ttl for this acquisition in milliseconds (default: the client's).
    pub ttl: Option<f64>,
    /// Merged into the key's stored metadata on grant.
    #[napi(ts_type = "Record<string, unknown>")]
    pub metadata: Option<()>,
    /// A shared grant (default `false`), as `AcquireOptions.shared`: `null` while the key is
    /// held exclusively or an acquire waits in its line (nobody jumps the line).
    pub shared: Option<bool>,
}

/// Options of `client.claim()`. Durations are in milliseconds.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct ClaimOptions {
    /// Claim up to this many keys at once (default 1; at most 1000).
    pub limit: Option<u32>,
    /// Lease ttl of the keys claimed (default: the client's).
    pub ttl: Option<f64>,
    /// When nothing is claimable, wait up to this long for a release, an offer or an expiry in
    /// the pool (default: answer at once). An empty answer after the wait is not an error.
    pub timeout: Option<f64>,
    /// Merged into each claimed key's metadata.
    #[napi(ts_type = "Record<string, unknown>")]
    pub metadata: Option<()>,
    /// Aborting it ends a waiting claim with `ACCORD_CANCELLED`, leaving nothing held.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<()>,
}

/// How many keys of a work pool are in each state, by the coordinator's clock.
#[napi(object, object_from_js = false)]
pub struct PoolCounts {
    /// Claimable now: never granted, released, or expired.
    pub free: f64,
    /// Held by a live lease.
    pub held: f64,
    /// Marked done.
    pub done: f64,
}

/// A query of `client.list()`: filters and paging.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct ListQuery {
    /// Only keys starting with this (compared literally: `%` and `_` are ordinary).
    pub prefix: Option<String>,
    /// Only keys in this state (default `"all"`).
    #[napi(ts_type = "'held' | 'free' | 'done' | 'all'")]
    pub state: Option<String>,
    /// Only keys whose metadata contains this object (JSON containment).
    #[napi(ts_type = "Record<string, unknown>")]
    pub metadata: Option<()>,
    /// Page size (default 100, at most 1000).
    pub limit: Option<u32>,
    /// Continue after the page that returned this `nextCursor`.
    pub cursor: Option<String>,
}

/// One key as the coordinator knows it.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct LeaseInfo {
    pub key: String,
    /// `held` (granted to a lease that has not expired), `free` (released or expired) or
    /// `done` (not granted again until `reset`), by the coordinator's clock at the query.
    #[napi(ts_type = "'held' | 'free' | 'done'")]
    pub state: &'static str,
    /// The holder while held; who finished it when done; `null` when free.
    pub owner: Option<String>,
    /// The fence of the latest grant of this key.
    pub fence: BigInt,
    /// When the current lease expires (held keys only).
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The key's metadata (merged over its grants, renewals and done).
    #[napi(ts_type = "Record<string, unknown>")]
    pub metadata: accord::serde_json::Value,
    /// When the key last changed.
    pub updated_at: chrono::DateTime<chrono::Utc>,
    /// One of the key's shared holders: a key held shared is listed once per holder, each
    /// with its own owner, fence and expiry.
    pub shared: bool,
}

/// One page of `list()`, in key order.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct ListPage {
    pub items: Vec<LeaseInfo>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

impl From<accord::ListPage> for ListPage {
    fn from(page: accord::ListPage) -> Self {
        ListPage {
            items: page
                .items
                .into_iter()
                .map(|info| LeaseInfo {
                    key: info.key,
                    state: info.state.as_str(),
                    owner: info.owner,
                    fence: BigInt::from(info.fence),
                    expires_at: info.expires_at,
                    metadata: accord::serde_json::Value::Object(info.metadata),
                    updated_at: info.updated_at,
                    shared: info.shared,
                })
                .collect(),
            next_cursor: page.next_cursor,
        }
    }
}

/// Connects to the coordinator named by `url` (`postgres://user:password@host:port/db?sslmode=…`,
/// `postgresql://…`, or a libpq `key=value` string) and applies pending migrations unless
/// `migrate: false`.
#[napi(
    ts_args_type = "url: string, options?: ClientOptions | null",
    ts_return_type = "Promise<Client>"
)]
pub fn connect<'e>(
    env: &'e Env,
    url: Unknown,
    options: Option<Unknown>,
) -> Result<PromiseRaw<'e, Client>> {
    let parsed = parse_connect(&url, options);
    settle_map(
        env,
        async move {
            let (url, options) = parsed?;
            Ok(accord::Client::connect(&url, options).await?)
        },
        |_, inner| Ok(Client { inner }),
    )
}

fn parse_connect(
    url: &Unknown,
    options: Option<Unknown>,
) -> Outcome<(String, accord::ClientOptions)> {
    let url = string("url", url)?;
    let mut parsed = accord::ClientOptions::new();
    if let Some(o) = opt_options("options", options, CLIENT_OPTIONS)? {
        if let Some(v) = opt_string("options.namespace", &property(&o, "namespace")?)? {
            parsed = parsed.namespace(v);
        }
        if let Some(v) = opt_string("options.owner", &property(&o, "owner")?)? {
            parsed = parsed.owner(v);
        }
        if let Some(v) = opt_ttl("options.ttl", &property(&o, "ttl")?)? {
            parsed = parsed.ttl(v);
        }
        if let Some(v) = opt_string("options.schema", &property(&o, "schema")?)? {
            parsed = parsed.schema(v);
        }
        if let Some(v) = opt_integer("options.poolSize", &property(&o, "poolSize")?)? {
            parsed = parsed.pool_size(accord::limits::pool_size(v)?);
        }
        if let Some(v) = opt_millis(
            "options.connectTimeout",
            &property(&o, "connectTimeout")?,
            false,
        )? {
            parsed = parsed.connect_timeout(v);
        }
        if let Some(v) = opt_millis(
            "options.statementTimeout",
            &property(&o, "statementTimeout")?,
            false,
        )? {
            parsed = parsed.statement_timeout(v);
        }
        if let Some(v) = opt_bool("options.migrate", &property(&o, "migrate")?)? {
            parsed = parsed.migrate(v);
        }
        if let Some(v) = opt_string("options.applicationName", &property(&o, "applicationName")?)? {
            parsed = parsed.application_name(v);
        }
        if let Some(v) = opt_string("options.listenUrl", &property(&o, "listenUrl")?)? {
            parsed = parsed.listen_url(v);
        }
        if let Some(v) = opt_bool(
            "options.prepareStatements",
            &property(&o, "prepareStatements")?,
        )? {
            parsed = parsed.prepare_statements(v);
        }
        if let Some(v) = opt_bool("options.closeOnSigterm", &property(&o, "closeOnSigterm")?)? {
            parsed = parsed.close_on_sigterm(v);
        }
    }
    Ok((url, parsed))
}

/// `addEventListener` / `removeEventListener` of an `AbortSignal`, and the listener they take.
type Listener<'a> = Function<'a, (), ()>;
type ListenerMethod<'a> = Function<'a, FnArgs<(&'a str, Listener<'a>)>, Unknown<'a>>;

/// An `AbortSignal` wired to a cancellation token for the time of one acquire or claim.
pub(crate) struct AbortWatch {
    signal: ObjectRef<false>,
    listener: FunctionRef<(), ()>,
}

impl AbortWatch {
    /// Cancels `token` when `signal` aborts; fails at once if it already has (as the core
    /// says of `what` when the signal aborts during the wait).
    pub(crate) fn start(
        env: &Env,
        what: &str,
        signal: &Unknown,
        token: CancellationToken,
    ) -> Outcome<Self> {
        let not_a_signal = || Failure::invalid("options.signal", "expected an AbortSignal");
        let Some(signal) = opt_object("options.signal", Some(*signal))? else {
            return Err(not_a_signal());
        };
        let aborted = property(&signal, "aborted")?;
        let add = property(&signal, "addEventListener")?;
        if aborted.get_type()? != ValueType::Boolean || add.get_type()? != ValueType::Function {
            return Err(not_a_signal());
        }
        if unsafe { aborted.cast::<bool>() }? {
            return Err(accord::Error::cancelled(what).into());
        }
        let listener = env.create_function_from_closure::<(), (), _>("accordAbort", move |_| {
            token.cancel();
            Ok(())
        })?;
        let add: ListenerMethod = unsafe { add.cast() }?;
        call_method(env, &add, signal, ("abort", listener).into())?;
        Ok(AbortWatch {
            signal: signal.create_ref()?,
            listener: listener.create_ref()?,
        })
    }

    /// The watch of `options.signal` and the token it cancels; none without a signal.
    pub(crate) fn from_options(
        env: &Env,
        what: &str,
        options: &Object,
    ) -> Outcome<Option<(Self, CancellationToken)>> {
        let signal = property(options, "signal")?;
        if matches!(signal.get_type()?, ValueType::Undefined | ValueType::Null) {
            return Ok(None);
        }
        let token = CancellationToken::new();
        let watch = AbortWatch::start(env, what, &signal, token.clone())?;
        Ok(Some((watch, token)))
    }

    /// Removes the listener, so that a long-lived signal does not collect one per acquire.
    pub(crate) fn stop(self, env: &Env) {
        let _ = (|| -> Result<()> {
            let signal = self.signal.get_value(env)?;
            let listener = self.listener.borrow_back(env)?;
            let remove: ListenerMethod =
                signal.get_named_property_unchecked("removeEventListener")?;
            call_method(env, &remove, signal, ("abort", listener).into())?;
            Ok(())
        })();
        let _ = self.signal.unref(env);
        drop(self.listener);
    }

    /// Lets go of the signal without calling JavaScript (in a finalizer): the listener stays on
    /// the signal, cancelling its token if it ever aborts.
    pub(crate) fn forget(self, env: &Env) {
        let _ = self.signal.unref(env);
        drop(self.listener);
    }
}

/// A connection to a coordinator: leases, notifications and inspection of keys.
///
/// Nothing keeps the Node process alive on the client's account but its pending calls, open
/// subscriptions and the `lost` Promises of its held leases. `close()` it when done.
#[napi]
pub struct Client {
    inner: accord::Client,
}

#[napi]
impl Client {
    /// The owner recorded on this client's leases.
    #[napi(getter)]
    pub fn owner(&self) -> String {
        self.inner.owner().to_string()
    }

    /// The namespace of this client's keys.
    #[napi(getter)]
    pub fn namespace(&self) -> String {
        self.inner.namespace().to_string()
    }

    /// True once `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Waits in the key's line until `key` is granted (in arrival order, whatever the client),
    /// then resolves with its lease. Rejects with `ACCORD_DONE` if the key is done,
    /// `ACCORD_TIMEOUT` after `timeout` ms, `ACCORD_CANCELLED` when `signal` aborts,
    /// `ACCORD_CLOSED` when the client closes; then nothing is left held and the place in line
    /// is given up.
    #[napi(
        ts_args_type = "key: string, options?: AcquireOptions | null",
        ts_return_type = "Promise<Lease>"
    )]
    pub fn acquire<'e>(
        &self,
        env: &'e Env,
        key: Unknown,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Lease>> {
        let mut watch = None;
        let parsed = (|| -> Outcome<_> {
            let key = string("key", &key)?;
            let mut parsed = accord::AcquireOptions::new();
            if let Some(o) = opt_options("options", options, ACQUIRE_OPTIONS)? {
                parsed = common_acquire_options(env, &o, parsed)?;
                parsed = shared_option(&o, parsed)?;
                if let Some(t) = opt_millis("options.timeout", &property(&o, "timeout")?, true)? {
                    parsed = parsed.timeout(t);
                }
                if let Some((w, token)) =
                    AbortWatch::from_options(env, &format!("acquire of {key:?}"), &o)?
                {
                    watch = Some(w);
                    parsed = parsed.cancel(token);
                }
            }
            Ok((key, parsed))
        })();
        let client = self.inner.clone();
        settle(
            env,
            async move {
                let (key, options) = parsed?;
                Ok(client.acquire(&key, options).await?)
            },
            move |env, outcome| {
                if let Some(watch) = watch {
                    watch.stop(env);
                }
                Ok(Lease::adopt(outcome?))
            },
        )
    }

    /// Tries once: resolves with the lease if `key` is free, `null` if it is held (by anyone,
    /// this client included: leases are not re-entrant). Rejects with `ACCORD_DONE` if the key
    /// is done.
    #[napi(
        ts_args_type = "key: string, options?: TryAcquireOptions | null",
        ts_return_type = "Promise<Lease | null>"
    )]
    pub fn try_acquire<'e>(
        &self,
        env: &'e Env,
        key: Unknown,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Option<Lease>>> {
        let parsed = (|| -> Outcome<_> {
            let key = string("key", &key)?;
            let mut parsed = accord::AcquireOptions::new();
            if let Some(o) = opt_options("options", options, TRY_ACQUIRE_OPTIONS)? {
                parsed = common_acquire_options(env, &o, parsed)?;
                parsed = shared_option(&o, parsed)?;
            }
            Ok((key, parsed))
        })();
        let client = self.inner.clone();
        settle_map(
            env,
            async move {
                let (key, options) = parsed?;
                Ok(client.try_acquire(&key, options).await?)
            },
            |_, lease| Ok(lease.map(Lease::adopt)),
        )
    }

    /// Offers `keys` to the work pool `prefix`: each becomes claimable by `claim(prefix)`.
    /// Every key must start with the prefix (and be longer); at most 5000 per call. Idempotent:
    /// a key already in a pool, held or done, stays as it is. `metadata` is the metadata of keys
    /// new to the coordinator. Resolves with how many keys joined; wakes waiting claimers.
    #[napi(
        ts_args_type = "prefix: string, keys: string[], metadata?: Record<string, unknown> | null",
        ts_return_type = "Promise<number>"
    )]
    pub fn offer<'e>(
        &self,
        env: &'e Env,
        prefix: Unknown,
        keys: Unknown,
        metadata: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, f64>> {
        let parsed = (|| -> Outcome<_> {
            let prefix = string("prefix", &prefix)?;
            let keys = strings("keys", &keys)?;
            let metadata = match metadata {
                Some(m) => opt_metadata(env, "metadata", &m)?,
                None => None,
            };
            Ok((prefix, keys, metadata))
        })();
        let client = self.inner.clone();
        settle_ok(env, async move {
            let (prefix, keys, metadata) = parsed?;
            Ok(client.offer(&prefix, keys, metadata).await? as f64)
        })
    }

    /// Claims up to `options.limit` free keys of the work pool `prefix` (oldest offer first),
    /// each an ordinary `Lease`. Resolves with an empty array when nothing is claimable: at
    /// once, or after waiting up to `options.timeout` ms for a release, an offer or an expiry in
    /// the pool. Concurrent claimers never get the same key. Rejects with `ACCORD_CANCELLED`
    /// when `signal` aborts a waiting claim, `ACCORD_CLOSED` when the client closes; then
    /// nothing is left held.
    #[napi(
        ts_args_type = "prefix: string, options?: ClaimOptions | null",
        ts_return_type = "Promise<Lease[]>"
    )]
    pub fn claim<'e>(
        &self,
        env: &'e Env,
        prefix: Unknown,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Vec<Lease>>> {
        let mut watch = None;
        let parsed = (|| -> Outcome<_> {
            let prefix = string("prefix", &prefix)?;
            let mut parsed = accord::ClaimOptions::new();
            if let Some(o) = opt_options("options", options, CLAIM_OPTIONS)? {
                if let Some(limit) = opt_integer("options.limit", &property(&o, "limit")?)? {
                    parsed = parsed.limit(accord::limits::claim_limit(limit)?);
                }
                if let Some(ttl) = opt_ttl("options.ttl", &property(&o, "ttl")?)? {
                    parsed = parsed.ttl(ttl);
                }
                let timeout = property(&o, "timeout")?;
                if timeout.get_type()? == ValueType::Number
                    && unsafe { timeout.cast::<f64>() }? == f64::INFINITY
                {
                    // A claim without a timeout answers at once: there is no "wait forever".
                    return Err(Failure::invalid(
                        "options.timeout",
                        "must be finite for a claim (leave it out to answer at once)",
                    ));
                }
                if let Some(t) = opt_millis("options.timeout", &timeout, false)? {
                    parsed = parsed.timeout(t);
                }
                if let Some(m) = opt_metadata(env, "options.metadata", &property(&o, "metadata")?)?
                {
                    parsed = parsed.metadata(m);
                }
                if let Some((w, token)) =
                    AbortWatch::from_options(env, &format!("claim of {prefix:?}"), &o)?
                {
                    watch = Some(w);
                    parsed = parsed.cancel(token);
                }
            }
            Ok((prefix, parsed))
        })();
        let client = self.inner.clone();
        settle(
            env,
            async move {
                let (prefix, options) = parsed?;
                Ok(client.claim(&prefix, options).await?)
            },
            move |env, outcome| {
                if let Some(watch) = watch {
                    watch.stop(env);
                }
                Ok(outcome?.into_iter().map(Lease::adopt).collect())
            },
        )
    }

    /// How many keys of the work pool `prefix` are free, held and done.
    #[napi(
        ts_args_type = "prefix: string",
        ts_return_type = "Promise<PoolCounts>"
    )]
    pub fn counts<'e>(&self, env: &'e Env, prefix: Unknown) -> Result<PromiseRaw<'e, PoolCounts>> {
        let prefix = string("prefix", &prefix);
        let client = self.inner.clone();
        settle_ok(env, async move {
            let counts = client.counts(&prefix?).await?;
            Ok(PoolCounts {
                free: counts.free as f64,
                held: counts.held as f64,
                done: counts.done as f64,
            })
        })
    }

    /// Opens the semaphore `name` with `limit` permits (1 ..= 10000), offering the permits it
    /// needs: at most `limit` holders at once, each with an ordinary `Lease`. Open every
    /// handle of a name with the same limit.
    #[napi(
        ts_args_type = "name: string, limit: number",
        ts_return_type = "Promise<Semaphore>"
    )]
    pub fn semaphore<'e>(
        &self,
        env: &'e Env,
        name: Unknown,
        limit: Unknown,
    ) -> Result<PromiseRaw<'e, Semaphore>> {
        let parsed = (|| -> Outcome<_> {
            let name = string("name", &name)?;
            let limit = accord::limits::permits(integer("limit", &limit)?)?;
            Ok((name, limit))
        })();
        let client = self.inner.clone();
        settle_map(
            env,
            async move {
                let (name, limit) = parsed?;
                Ok(client.semaphore(&name, limit).await?)
            },
            |_, inner| Ok(Semaphore::new(inner)),
        )
    }

    /// Joins the group `group`: a `Member` whose lease (key `accord.group/<group>/<owner>`) the
    /// client's keepalive renews. Watchers of the group see `'joined'`. One membership per owner
    /// and group: a second join waits for the first to leave (up to the ttl, then
    /// `ACCORD_TIMEOUT`).
    #[napi(
        ts_args_type = "group: string, options?: JoinOptions | null",
        ts_return_type = "Promise<Member>"
    )]
    pub fn join<'e>(
        &self,
        env: &'e Env,
        group: Unknown,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Member>> {
        let parsed = (|| -> Outcome<_> {
            let group = string("group", &group)?;
            let mut parsed = accord::JoinOptions::new();
            if let Some(o) = opt_options("options", options, JOIN_OPTIONS)? {
                if let Some(m) = opt_metadata(env, "options.metadata", &property(&o, "metadata")?)?
                {
                    parsed = parsed.metadata(m);
                }
                if let Some(ttl) = opt_ttl("options.ttl", &property(&o, "ttl")?)? {
                    parsed = parsed.ttl(ttl);
                }
            }
            Ok((group, parsed))
        })();
        let client = self.inner.clone();
        settle_map(
            env,
            async move {
                let (group, options) = parsed?;
                Ok(client.join(&group, options).await?)
            },
            |_, member| Ok(Member::adopt(member)),
        )
    }

    /// The live members of `group` (owner, metadata, since, fence, expiresAt), oldest first,
    /// in one read.
    #[napi(
        ts_args_type = "group: string",
        ts_return_type = "Promise<MemberInfo[]>"
    )]
    pub fn members<'e>(
        &self,
        env: &'e Env,
        group: Unknown,
    ) -> Result<PromiseRaw<'e, Vec<MemberInfo>>> {
        let group = string("group", &group);
        let client = self.inner.clone();
        settle_map(
            env,
            async move { Ok(client.members(&group?).await?) },
            |_, members| Ok(member_infos(members)),
        )
    }

    /// Watches `group`: iterate it with `for await` for the current members (`'members'`), then
    /// `'joined'`, `'left'` and `'updated'` in order. Resolves once listening, so no change
    /// made after it resolves is missed.
    #[napi(
        ts_args_type = "group: string",
        ts_return_type = "Promise<MemberWatch>"
    )]
    pub fn watch<'e>(&self, env: &'e Env, group: Unknown) -> Result<PromiseRaw<'e, MemberWatch>> {
        let group = string("group", &group);
        let client = self.inner.clone();
        settle_map(
            env,
            async move { Ok(client.watch(&group?).await?) },
            |_, watch| Ok(MemberWatch::adopt(watch)),
        )
    }

    /// Joins the fleet `name` and starts balancing its shards in the background: `shards: n`
    /// (named `"0"` to `"n-1"`) or `keys`, exactly one. Read its events with `for await` or
    /// `nextEvent()`; `close()` hands every shard back.
    #[napi(
        ts_args_type = "name: string, options: FleetOptions",
        ts_return_type = "Promise<Fleet>"
    )]
    pub fn fleet<'e>(
        &self,
        env: &'e Env,
        name: Unknown,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Fleet>> {
        let parsed = parse_fleet(env, &name, options);
        let client = self.inner.clone();
        settle_map(
            env,
            async move {
                let (name, options) = parsed?;
                Ok(client.fleet(&name, options).await?)
            },
            |_, fleet| Ok(Fleet::adopt(fleet)),
        )
    }

    /// The election `name`: `campaign` to lead it, `leader()` to read its leader, `observe()` to
    /// follow its leaders. Throws `ACCORD_INVALID_ARGUMENT` (naming `election`) for a name that
    /// cannot be one, `ACCORD_CLOSED` once the client is closed.
    #[napi(ts_args_type = "name: string")]
    pub fn election(&self, env: &Env, name: Unknown) -> Result<Election> {
        let opened = (|| -> Outcome<_> {
            let name = string("name", &name)?;
            Ok(self.inner.election(&name)?)
        })();
        opened.map(Election::new).map_err(|f| f.into_napi(env))
    }

    /// What this client did since it connected: counters (numbers) and latency histograms
    /// (`{ count, sumMs, maxMs, p50Ms, p99Ms }`, milliseconds). Synchronous: it reads counters,
    /// and answers after `close()` too.
    #[napi]
    pub fn stats(&self) -> Stats {
        self.inner.stats().into()
    }

    /// How many leases this client holds and keeps alive now.
    #[napi]
    pub fn held_count(&self) -> f64 {
        self.inner.held_count() as f64
    }

    /// How many times this client's waiting acquires (and campaigns) were woken by another
    /// client's release: a release wakes the head of its key's line only. For tests and
    /// diagnostics.
    #[napi]
    pub fn waiter_wakeups(&self) -> f64 {
        self.inner.waiter_wakeups() as f64
    }

    /// How many of this client's waiting acquires (and campaigns) hold a place in a key's line
    /// now. For tests and diagnostics: a waiter counts here once its place is taken.
    #[napi]
    pub fn queued_count(&self) -> f64 {
        self.inner.queued_count() as f64
    }

    /// Makes a done (or free) key unknown again, so that it can be acquired. Resolves with
    /// `false` if the key was not known; rejects with `ACCORD_HELD` if a live lease holds it.
    #[napi(ts_args_type = "key: string", ts_return_type = "Promise<boolean>")]
    pub fn reset<'e>(&self, env: &'e Env, key: Unknown) -> Result<PromiseRaw<'e, bool>> {
        let key = string("key", &key);
        let client = self.inner.clone();
        settle_ok(env, async move { Ok(client.reset(&key?).await?) })
    }

    /// Lists keys of this client's namespace, in key order, one page at a time.
    #[napi(
        ts_args_type = "query?: ListQuery | null",
        ts_return_type = "Promise<ListPage>"
    )]
    pub fn list<'e>(
        &self,
        env: &'e Env,
        query: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, ListPage>> {
        let parsed = parse_list(env, query);
        let client = self.inner.clone();
        settle_ok(env, async move {
            Ok(ListPage::from(client.list(parsed?).await?))
        })
    }

    /// Sends `payload` on `channel` to every listener, whatever its language or connection
    /// (PostgreSQL NOTIFY; payloads must be under 8000 bytes).
    #[napi(
        ts_args_type = "channel: string, payload?: string",
        ts_return_type = "Promise<void>"
    )]
    pub fn notify<'e>(
        &self,
        env: &'e Env,
        channel: Unknown,
        payload: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, ()>> {
        let parsed = (|| -> Outcome<_> {
            let channel = string("channel", &channel)?;
            let payload = match payload {
                Some(p) => opt_string("payload", &p)?.unwrap_or_default(),
                None => String::new(),
            };
            Ok((channel, payload))
        })();
        let client = self.inner.clone();
        settle_ok(env, async move {
            let (channel, payload) = parsed?;
            Ok(client.notify(&channel, &payload).await?)
        })
    }

    /// Starts receiving notifications on `channels`. Resolves once every notification sent
    /// from then on will be delivered; iterate the subscription with `for await`.
    #[napi(
        ts_args_type = "...channels: string[]",
        ts_return_type = "Promise<Subscription>"
    )]
    pub fn listen<'e>(
        &self,
        env: &'e Env,
        channels: Unknown,
    ) -> Result<PromiseRaw<'e, Subscription>> {
        self.listen_all(env, vec![channels])
    }

    /// Appends `payload` (any string, NUL included, up to 64 KiB of UTF-8) to `stream` and
    /// resolves with its seq: 1 for the stream's first event, one more for each after it, in
    /// the order the publishes committed. Concurrent publishes share statements. On
    /// `ACCORD_CONNECTION` the event may or may not be stored.
    #[napi(
        ts_args_type = "stream: string, payload: string",
        ts_return_type = "Promise<bigint>"
    )]
    pub fn publish<'e>(
        &self,
        env: &'e Env,
        stream: Unknown,
        payload: Unknown,
    ) -> Result<PromiseRaw<'e, BigInt>> {
        let parsed =
            (|| -> Outcome<_> { Ok((string("stream", &stream)?, string("payload", &payload)?)) })();
        let client = self.inner.clone();
        settle_ok(env, async move {
            let (stream, payload) = parsed?;
            Ok(BigInt::from(client.publish(&stream, &payload).await?))
        })
    }

    /// Appends `payloads` to `stream` in this order (at most 10000 per call) and resolves with
    /// their seqs, increasing in the same order.
    #[napi(
        ts_args_type = "stream: string, payloads: string[]",
        ts_return_type = "Promise<bigint[]>"
    )]
    pub fn publish_many<'e>(
        &self,
        env: &'e Env,
        stream: Unknown,
        payloads: Unknown,
    ) -> Result<PromiseRaw<'e, Vec<BigInt>>> {
        let parsed = (|| -> Outcome<_> {
            Ok((string("stream", &stream)?, strings("payloads", &payloads)?))
        })();
        let client = self.inner.clone();
        settle_ok(env, async move {
            let (stream, payloads) = parsed?;
            let seqs = client.publish_many(&stream, payloads).await?;
            Ok(seqs.into_iter().map(BigInt::from).collect())
        })
    }

    /// Reads `stream`: the stored events from where `after` says, then live ones, each once and
    /// in seq order, across reconnects. Resolves once events published from then on will be
    /// delivered; iterate the subscription with `for await`. Rejects with `ACCORD_TRIMMED` when
    /// the events to start with were deleted by the stream's retention, `ACCORD_CANCELLED` when
    /// `signal` has already aborted.
    #[napi(
        ts_args_type = "stream: string, options?: SubscribeOptions | null",
        ts_return_type = "Promise<StreamSubscription>"
    )]
    pub fn subscribe<'e>(
        &self,
        env: &'e Env,
        stream: Unknown,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, StreamSubscription>> {
        let (parsed, abort) = match parse_subscribe(env, &stream, options) {
            Ok(s) => (Ok((s.stream, s.options)), s.abort),
            Err(f) => (Err(f), None),
        };
        let client = self.inner.clone();
        settle(
            env,
            async move {
                let (stream, options) = parsed?;
                Ok(client.subscribe(&stream, options).await?)
            },
            move |env, outcome| match outcome {
                Ok(inner) => Ok(StreamSubscription::adopt(inner, abort)),
                Err(f) => {
                    if let Some((watch, _)) = abort {
                        watch.stop(env);
                    }
                    Err(f)
                }
            },
        )
    }

    /// The stream's first and last stored seq and its retention (one read).
    #[napi(
        ts_args_type = "stream: string",
        ts_return_type = "Promise<StreamInfo>"
    )]
    pub fn stream_info<'e>(
        &self,
        env: &'e Env,
        stream: Unknown,
    ) -> Result<PromiseRaw<'e, StreamInfo>> {
        let stream = string("stream", &stream);
        let client = self.inner.clone();
        settle_ok(env, async move {
            Ok(StreamInfo::from(client.stream_info(&stream?).await?))
        })
    }

    /// Sets how long `stream` keeps its events, replacing its rule (`{}` keeps every event):
    /// `maxLen` keeps the newest events only, `maxAge` (ms) the recent ones only. Trims at once
    /// and resolves with how many events that deleted; later trimming runs in the background
    /// of publishing clients.
    #[napi(
        ts_args_type = "stream: string, retention: StreamRetention",
        ts_return_type = "Promise<number>"
    )]
    pub fn set_stream_retention<'e>(
        &self,
        env: &'e Env,
        stream: Unknown,
        retention: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, f64>> {
        let parsed = parse_retention(&stream, retention);
        let client = self.inner.clone();
        settle_ok(env, async move {
            let (stream, retention) = parsed?;
            Ok(client.set_stream_retention(&stream, retention).await? as f64)
        })
    }

    /// The channels this client's listening connection has LISTENed, as the server reports
    /// them (for tests and diagnostics; not part of the typed API).
    #[napi(js_name = "_listeningChannels", skip_typescript)]
    pub fn listening_channels<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Vec<String>>> {
        let client = self.inner.clone();
        settle_ok(env, async move { Ok(client.listening_channels().await?) })
    }

    /// Closes the client: held leases are released (their `lost` resolves), waiting acquires
    /// and subscriptions end with `ACCORD_CLOSED`, connections close. Afterwards `renew`,
    /// `release` and `done` of any of its leases reject with `ACCORD_CLOSED`. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        let client = self.inner.clone();
        settle_ok(env, async move {
            client.close().await;
            Ok(())
        })
    }

    /// `await using client = await connect(url)` closes it at the end of the block.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.close(env)
    }
}

impl Client {
    /// `listen` with every argument (see `lib.rs`: napi declares a fixed number of them).
    pub(crate) fn listen_all<'e>(
        &self,
        env: &'e Env,
        channels: Vec<Unknown>,
    ) -> Result<PromiseRaw<'e, Subscription>> {
        let parsed = channels
            .iter()
            .enumerate()
            .map(|(i, c)| string(&format!("channel (argument {})", i + 1), c))
            .collect::<Outcome<Vec<String>>>();
        let client = self.inner.clone();
        let client_closed = self.inner.closed();
        settle_map(
            env,
            async move { Ok(client.listen(parsed?).await?) },
            move |env, subscription| {
                Subscription::open(env, subscription, client_closed).map_err(Failure::internal)
            },
        )
    }
}

/// `options.shared` of `acquire` and `tryAcquire` (not of a semaphore's: its permits are
/// exclusive, and its options type leaves `shared` out).
fn shared_option(o: &Object, parsed: accord::AcquireOptions) -> Outcome<accord::AcquireOptions> {
    Ok(match opt_bool("options.shared", &property(o, "shared")?)? {
        Some(shared) => parsed.shared(shared),
        None => parsed,
    })
}

pub(crate) fn common_acquire_options(
    env: &Env,
    o: &Object,
    mut parsed: accord::AcquireOptions,
) -> Outcome<accord::AcquireOptions> {
    if let Some(ttl) = opt_ttl("options.ttl", &property(o, "ttl")?)? {
        parsed = parsed.ttl(ttl);
    }
    if let Some(m) = opt_metadata(env, "options.metadata", &property(o, "metadata")?)? {
        parsed = parsed.metadata(m);
    }
    Ok(parsed)
}

fn parse_list(env: &Env, query: Option<Unknown>) -> Outcome<accord::ListQuery> {
    let mut parsed = accord::ListQuery::new();
    let Some(q) = opt_options("query", query, LIST_QUERY)? else {
        return Ok(parsed);
    };
    if let Some(prefix) = opt_string("query.prefix", &property(&q, "prefix")?)? {
        parsed = parsed.prefix(prefix);
    }
    if let Some(state) = opt_string("query.state", &property(&q, "state")?)? {
        parsed = parsed.states(accord::StateFilter::parse("query.state", &state)?);
    }
    if let Some(m) = opt_metadata(env, "query.metadata", &property(&q, "metadata")?)? {
        parsed = parsed.metadata(m);
    }
    if let Some(limit) = opt_integer("query.limit", &property(&q, "limit")?)? {
        parsed = parsed.limit(accord::limits::list_limit(limit)?);
    }
    if let Some(cursor) = opt_string("query.cursor", &property(&q, "cursor")?)? {
        parsed = parsed.cursor(cursor);
    }
    Ok(parsed)
}
