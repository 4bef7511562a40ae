//! Options of clients and calls, and the records that `list` returns.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::metadata::Metadata;
use crate::validate;

/// How a [`crate::Client`] connects and behaves. Every field has a default; set the ones you
/// need with the builder methods.
#[derive(Clone)]
pub struct ClientOptions {
    pub(crate) namespace: String,
    pub(crate) owner: Option<String>,
    pub(crate) ttl: Duration,
    pub(crate) schema: String,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) statement_timeout: Duration,
    pub(crate) slow_statement: Duration,
    pub(crate) migrate: bool,
    pub(crate) application_name: String,
    pub(crate) listen_url: Option<String>,
    pub(crate) prepare_statements: bool,
    pub(crate) record_stats: bool,
    pub(crate) close_on_sigterm: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            namespace: "default".into(),
            owner: None,
            ttl: Duration::from_secs(30),
            schema: "accord".into(),
            pool_size: 2,
            connect_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(10),
            slow_statement: Duration::from_secs(1),
            migrate: true,
            application_name: "accord".into(),
            listen_url: None,
            prepare_statements: true,
            record_stats: true,
            close_on_sigterm: true,
        }
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("namespace", &self.namespace)
            .field("owner", &self.owner)
            .field("ttl", &self.ttl)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

impl ClientOptions {
    /// Checks every field (G11), naming the one that is wrong.
    pub(crate) fn validate(&self) -> Result<()> {
        validate::name("namespace", &self.namespace)?;
        if let Some(owner) = &self.owner {
            validate::name("owner", owner)?;
        }
        validate::ttl("ttl", self.ttl)?;
        validate::schema(&self.schema)?;
        validate::pool_size(i64::try_from(self.pool_size).unwrap_or(i64::MAX))?;
        Ok(())
    }

    /// Options with every default.
    pub fn new() -> Self {
        Self::default()
    }
    /// Keys live in a namespace (default `"default"`); clients of different namespaces never
    /// contend.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
    /// The owner recorded on every lease (default: `host-pid-random`). Two clients with the same
    /// owner still exclude each other: leases are not re-entrant.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
    /// Default lease ttl for this client (default 30 s; 100 ms ..= 24 h).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// The database schema holding accord's tables (default `accord`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }
    /// Number of pipelined command connections (default 2; 1 ..= 64). One more connection
    /// listens for notifications.
    pub fn pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size;
        self
    }
    /// Where the listening connection goes (PostgreSQL only; default: the client's URL): a
    /// direct or session-pooled URL of the same database, when commands go through a
    /// PgBouncer in transaction mode, where LISTEN cannot receive. Every listening connection
    /// checks that it hears a NOTIFY sent through the command connections; one that does not
    /// makes `listen` fail with an error naming this option.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }
    /// Whether each command connection prepares accord's statements once (default true: one
    /// round trip per call, planned once). `false` sends each statement with its text (still one
    /// round trip, planned each time): needed behind a PgBouncer in transaction mode before
    /// 1.21 (or with `max_prepared_statements = 0`), which hands each transaction any server
    /// connection, where a statement prepared on another is missing and another client's
    /// statement of the same name may be found.
    pub fn prepare_statements(mut self, prepare: bool) -> Self {
        self.prepare_statements = prepare;
        self
    }
    /// Whether the client records its stats (default true; see [`crate::Client::stats`]). For
    /// measuring the cost of stats only (`make bench`'s stats scenario): with `false` the
    /// counters and histograms stay at zero and nothing goes to the `metrics` facade; the
    /// clock reads around calls remain. Leave it on: it costs a few relaxed atomic adds.
    pub fn record_stats(mut self, record: bool) -> Self {
        self.record_stats = record;
        self
    }
    /// Whether [`crate::close_all`] closes this client (default true). The Python and Node
    /// bindings call it when the process gets SIGTERM; Rust installs no handler (see
    /// `core/examples/sigterm.rs`). Turn it off for a client the program closes itself.
    pub fn close_on_sigterm(mut self, close: bool) -> Self {
        self.close_on_sigterm = close;
        self
    }
    /// How long to wait for a connection to the coordinator (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
    /// How long one statement may take before its connection is considered broken
    /// (default 10 s).
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }
    /// Statements slower than this are reported with a `tracing` warning (default 1 s).
    pub fn slow_statement(mut self, threshold: Duration) -> Self {
        self.slow_statement = threshold;
        self
    }
    /// Apply pending schema migrations at connect (default true). With false, connect fails
    /// with `Database` if the schema is not at the version this library needs.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }
    /// `application_name` shown in `pg_stat_activity` (default `accord`).
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = name.into();
        self
    }
}

/// Options of one [`crate::Client::acquire`] or [`crate::Client::try_acquire`].
#[derive(Clone, Debug, Default)]
pub struct AcquireOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) metadata: Option<Metadata>,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) shared: bool,
}

impl AcquireOptions {
    /// Options with the client's defaults: its ttl, no metadata, wait without a time limit.
    pub fn new() -> Self {
        Self::default()
    }
    /// Lease ttl for this acquisition (default: the client's).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
    /// Give up waiting after this long with `Timeout` (default: wait until granted).
    /// Ignored by `try_acquire`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Metadata merged into the key's stored metadata on grant.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }
    /// Cancelling this token ends a waiting acquire with `Cancelled`, after making sure that
    /// nothing it may have been granted stays held. (Dropping the future also cancels; then
    /// the clean-up finishes in the background.)
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
    /// A shared grant: any number of shared holders at once, or one exclusive holder (the
    /// default). Once an exclusive acquire waits, new shared acquires wait behind it.
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }
}

/// The state of a key as `list` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyState {
    /// Granted to a lease that has not expired (by the coordinator's clock).
    Held,
    /// Known to the coordinator, not held, not done (released or expired).
    Free,
    /// Marked done; not granted again until `reset`.
    Done,
}

impl KeyState {
    /// `"held"`, `"free"` or `"done"`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Held => "held",
            KeyState::Free => "free",
            KeyState::Done => "done",
        }
    }
}

/// Which states `list` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StateFilter {
    /// Every key.
    #[default]
    All,
    /// Only keys in this state.
    Only(KeyState),
}

impl StateFilter {
    /// `"held"`, `"free"`, `"done"` or `"all"`, as the bindings take it; an `InvalidArgument`
    /// error naming `field` otherwise.
    pub fn parse(field: &str, text: &str) -> Result<StateFilter> {
        match text {
            "all" => Ok(StateFilter::All),
            "held" => Ok(StateFilter::Only(KeyState::Held)),
            "free" => Ok(StateFilter::Only(KeyState::Free)),
            "done" => Ok(StateFilter::Only(KeyState::Done)),
            other => Err(Error::invalid(
                field,
                format!("{other:?} is not one of \"held\", \"free\", \"done\", \"all\""),
            )),
        }
    }
}

/// A query for [`crate::Client::list`]: filters and paging.
#[derive(Clone, Debug)]
pub struct ListQuery {
    pub(crate) prefix: Option<String>,
    pub(crate) state: StateFilter,
    pub(crate) metadata: Option<Metadata>,
    pub(crate) limit: usize,
    pub(crate) cursor: Option<String>,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            prefix: None,
            state: StateFilter::All,
            metadata: None,
            limit: 100,
            cursor: None,
        }
    }
}

impl ListQuery {
    /// Every key of the namespace, first page of 100.
    pub fn new() -> Self {
        Self::default()
    }
    /// Only keys starting with `prefix` (compared literally: `%` and `_` are ordinary).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }
    /// Only keys in `state`.
    pub fn state(mut self, state: KeyState) -> Self {
        self.state = StateFilter::Only(state);
        self
    }
    /// Keys in the states `filter` admits.
    pub fn states(mut self, filter: StateFilter) -> Self {
        self.state = filter;
        self
    }
    /// Only keys whose metadata contains this object (JSON containment).
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }
    /// Page size (default 100, at most 1000).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
    /// Continue after the page that returned this cursor.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }
}

impl ListQuery {
    /// Checks every field (G11), naming the one that is wrong.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(prefix) = &self.prefix {
            if !prefix.is_empty() {
                validate::name("prefix", prefix)?;
            }
        }
        if let Some(m) = &self.metadata {
            validate::metadata("metadata filter", m)?;
        }
        validate::list_limit(i64::try_from(self.limit).unwrap_or(i64::MAX))?;
        self.range()?;
        Ok(())
    }

    /// Where the page starts, as both backends read it: keys in byte order (code points, as
    /// PostgreSQL's "C" collation and SQLite compare them), a key's shared holders after its
    /// own row by fence. In that order a prefix is one range of the primary key, so a page
    /// costs O(log n + page) however large the namespace.
    pub(crate) fn range(&self) -> Result<ListRange> {
        let after = self.cursor.as_deref().map(parse_cursor).transpose()?;
        let prefix = self.prefix.clone().unwrap_or_default();
        let below = prefix_end(&prefix);
        // The page starts at the prefix, or at the cursor when it lies past it.
        let from = match &after {
            Some((key, _)) if *key > prefix => key.clone(),
            _ => prefix,
        };
        // Free and held keys are never done: a page of either state reads only the keys not
        // done, through an index of those alone, so the finished work of a pool (most of a
        // large one's keys, all before its free keys in key order) costs it nothing.
        let undone_only = matches!(
            self.state,
            StateFilter::Only(KeyState::Free | KeyState::Held)
        );
        // A held key names its owner (a grant sets it, a release clears it, a renewal leaves
        // it): a page of held keys reads only the keys that name one, which PostgreSQL indexes
        // apart (schema version 8, `leases_owned`), so few held keys among a million free ones
        // cost a few index entries rather than the million.
        let owned_only = matches!(self.state, StateFilter::Only(KeyState::Held));
        Ok(ListRange {
            from,
            below,
            after,
            undone_only,
            owned_only,
        })
    }
}

/// The part of the key order a list page reads: keys `>= from` and `< below` (no end when
/// `None`), and strictly after the `(key, fence)` a previous page ended with.
#[derive(Clone, Debug)]
pub(crate) struct ListRange {
    pub from: String,
    pub below: Option<String>,
    pub after: Option<(String, i64)>,
    /// Only keys not done can be on the page (a state filter of free or held).
    pub undone_only: bool,
    /// Only keys that name an owner can be on the page (a state filter of held).
    pub owned_only: bool,
}

impl ListRange {
    /// Whether `key` lies in the range (`from` up to `below`; the cursor aside). The SQL
    /// stores filter in their statements; etcd's reads a namespace's shared holders and
    /// waiters whole.
    #[cfg(feature = "etcd")]
    pub fn contains(&self, key: &str) -> bool {
        key >= self.from.as_str() && self.below.as_deref().is_none_or(|b| key < b)
    }

    /// The cursor of a page that ended with this item.
    pub fn cursor_after(key: &str, fence: i64) -> String {
        serde_json::json!([key, fence]).to_string()
    }
}

impl ListPage {
    /// The page of `limit` items that key rows and shared holders make together, each list
    /// already in (key, fence) order, filtered, and read up to `limit + 1` (one more tells
    /// whether another page follows).
    pub(crate) fn merged(keys: Vec<LeaseInfo>, holders: Vec<LeaseInfo>, limit: usize) -> ListPage {
        let mut keys = keys.into_iter().peekable();
        let mut holders = holders.into_iter().peekable();
        let mut items = Vec::with_capacity(limit);
        let mut more = false;
        loop {
            let next = match (keys.peek(), holders.peek()) {
                (Some(k), Some(h)) if (h.key.as_str(), h.fence) < (k.key.as_str(), k.fence) => {
                    holders.next()
                }
                (Some(_), _) => keys.next(),
                (None, _) => holders.next(),
            };
            let Some(item) = next else { break };
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(item);
        }
        let next_cursor = if more {
            items
                .last()
                .map(|i| ListRange::cursor_after(&i.key, i.fence))
        } else {
            None
        };
        ListPage { items, next_cursor }
    }
}

/// A cursor is the JSON pair `[key, fence]` of the item a page ended with: opaque to callers,
/// and any key (quotes, line breaks) survives it.
fn parse_cursor(cursor: &str) -> Result<(String, i64)> {
    serde_json::from_str::<(String, i64)>(cursor).map_err(|_| {
        Error::invalid(
            "cursor",
            format!("{cursor:?} is not a cursor returned by list"),
        )
    })
}

/// The least string greater than every string starting with `prefix`, in code point order: the
/// prefix with its last character that can grow moved to the next one (surrogates are not
/// characters, so U+D7FF grows to U+E000). `None` for the empty prefix or one made only of
/// U+10FFFF: no string bounds it.
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(c as u32 + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// A string past every key that starts with `prefix`: its `prefix_end`, or, for a prefix of
/// nothing but U+10FFFF (which has none), the prefix followed by more U+10FFFF than a key's
/// bytes can hold.
pub(crate) fn pool_end(prefix: &str) -> String {
    prefix_end(prefix).unwrap_or_else(|| {
        let mut end = prefix.to_string();
        end.extend(std::iter::repeat_n(
            '\u{10FFFF}',
            validate::MAX_NAME_BYTES / 4 + 1,
        ));
        end
    })
}

/// One key as the coordinator knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseInfo {
    /// The key.
    pub key: String,
    /// Held, free or done, judged by the coordinator's clock at the time of the query.
    pub state: KeyState,
    /// The holder while held; who finished it when done; `None` when free.
    pub owner: Option<String>,
    /// The fence of the latest grant of this key.
    pub fence: i64,
    /// When the current lease expires (held keys only).
    pub expires_at: Option<DateTime<Utc>>,
    /// The key's metadata (merged over its grants, renewals and done).
    pub metadata: Metadata,
    /// When the key last changed.
    pub updated_at: DateTime<Utc>,
    /// One of the shared holders of the key (a key held shared is listed once per holder,
    /// each with its own owner, fence and expiry).
    pub shared: bool,
}

/// One page of [`LeaseInfo`], in key order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    /// The keys of this page.
    pub items: Vec<LeaseInfo>,
    /// Pass to [`ListQuery::cursor`] for the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// The keys under a prefix by state, as [`crate::Client::snapshot`] counts them: every key,
/// however many (a key held by shared holders counts once, as held).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyCounts {
    /// Keys held now (by one holder, or by shared holders).
    pub held: u64,
    /// Keys nobody holds that are not done.
    pub free: u64,
    /// Keys marked done.
    pub done: u64,
    /// Shared holders (granted shared leases) of the held keys.
    pub shared_holders: u64,
    /// Acquires waiting in line on these keys, exclusive and shared (see
    /// [`crate::NamespaceSnapshot::waiters`] for which waits are in line).
    pub waiting: u64,
}

impl KeyCounts {
    /// Every key: held, free and done.
    pub fn keys(&self) -> u64 {
        self.held + self.free + self.done
    }
}

/// Options of one [`crate::Client::claim`].
#[derive(Clone, Debug)]
pub struct ClaimOptions {
    pub(crate) limit: usize,
    pub(crate) ttl: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) metadata: Option<Metadata>,
    pub(crate) cancel: Option<CancellationToken>,
}

impl Default for ClaimOptions {
    fn default() -> Self {
        ClaimOptions {
            limit: 1,
            ttl: None,
            timeout: None,
            metadata: None,
            cancel: None,
        }
    }
}

impl ClaimOptions {
    /// One key, the client's ttl, no metadata, no waiting.
    pub fn new() -> Self {
        Self::default()
    }
    /// Claim up to this many keys at once (default 1; 1 ..= 1000).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
    /// Lease ttl of the keys claimed (default: the client's).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
    /// When nothing is claimable, wait up to this long for a release, an offer or an expiry
    /// (default: answer at once). An empty answer after the wait is not an error.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Metadata merged into each claimed key's metadata.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }
    /// Cancel the wait with this token (`Cancelled`; nothing is left held).
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

/// How many keys of a work pool are in each state, by the coordinator's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Claimable now: never granted, released, or expired.
    pub free: u64,
    /// Held by a live lease.
    pub held: u64,
    /// Marked done.
    pub done: u64,
}

impl PoolCounts {
    /// Every key of the pool.
    pub fn total(&self) -> u64 {
        self.free + self.held + self.done
    }
}

#[cfg(test)]
mod tests {
    use super::{pool_end, prefix_end};

    #[test]
    fn a_prefix_ends_at_the_next_string_in_code_point_order() {
        assert_eq!(prefix_end("a/"), Some("a0".into()));
        assert_eq!(prefix_end("a\u{10FFFF}"), Some("b".into()));
        assert_eq!(prefix_end("a\u{D7FF}"), Some("a\u{E000}".into()));
        assert_eq!(prefix_end("\u{10FFFF}\u{10FFFF}"), None);
        assert_eq!(prefix_end(""), None);
        assert_eq!(pool_end("a/"), "a0");
        let end = pool_end("\u{10FFFF}");
        let longest = "\u{10FFFF}".repeat(crate::validate::MAX_NAME_BYTES / 4);
        assert!(longest.len() <= crate::validate::MAX_NAME_BYTES && longest < end);
    }
}
