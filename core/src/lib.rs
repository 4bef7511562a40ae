//! # accord
//!
//! Locks, leases with fencing tokens, done-marking and notify/listen for worker fleets written
//! in several languages, coordinated through PostgreSQL.
//!
//! - [`Client::acquire`] waits for a key and returns a [`Lease`]: a guard renewed in the
//!   background (one statement per client per tick), with a [`Lease::fence`] that grows with
//!   every grant and a [`Lease::lost`] signal that fires *before* the coordinator could grant
//!   the key to anyone else.
//! - [`Lease::done`] finishes a unit of work for good; [`Client::list`] inspects keys.
//! - [`Client::notify`] and [`Client::listen`] carry messages between workers (PostgreSQL
//!   NOTIFY, so `psql` and triggers take part too).
//!
//! ```no_run
//! use std::time::Duration;
//! use accord::{AcquireOptions, Client, ClientOptions};
//!
//! # async fn run() -> accord::Result<()> {
//! let client = Client::connect(
//!     "postgres://localhost/app",
//!     ClientOptions::new().namespace("reports").ttl(Duration::from_secs(10)),
//! )
//! .await?;
//! if let Some(lease) = client.try_acquire("2026-11-22", AcquireOptions::new()).await? {
//!     // ... write the report, passing lease.fence() to the storage that checks it ...
//!     lease.done(None).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! The guarantees (G1–G12) are described in `docs/semantics.md`.
#![warn(missing_docs)]

// The crates.io page of accord-coord is core/README.md: its Rust example must compile.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;

// The layers, each using only those listed before it (docs/architecture.md):
// error, metadata, validate, options, rules → backend → session → lease, subscription →
// client.
mod backend;
mod client;
mod election;
mod error;
mod fenced;
#[cfg(feature = "sqlx")]
mod fenced_sqlx;
mod fleet;
mod lease;
mod membership;
mod metadata;
mod naming;
mod options;
mod rules;
mod semaphore;
mod session;
mod snapshot;
mod stats;
mod stream;
mod subscription;
mod validate;
mod wording;

pub use client::Client;
pub use election::{CampaignOptions, Election, Leader, Leadership, Observer};
pub use error::{Error, ErrorKind, Result};
pub use fenced::{fenced_refusal, Placeholders, SqlCall, SqlParam};
pub use fleet::{
    Fleet, FleetEvent, FleetOptions, RevokeReason, ShardLease, Shards, MAX_HANDOFFS_PER_PERIOD,
    MAX_SHARDS, MIN_PERIOD,
};
pub use lease::{Lease, LostSignal};
pub use membership::{JoinOptions, Member, MemberEvent, MemberInfo, MemberWatch};
/// Not part of the API: how channels are named, for the security tests, which show that any role
/// that knows the names can compute a recipe's channel (and so must learn nothing from it).
#[doc(hidden)]
pub use naming::channel_for as __channel_for;
pub use options::{
    AcquireOptions, ClaimOptions, ClientOptions, KeyCounts, KeyState, LeaseInfo, ListPage,
    ListQuery, PoolCounts, StateFilter,
};
pub use semaphore::Semaphore;
pub use session::{close_all, Event, LeaseStatus, LostReason, Message};
pub use snapshot::{
    ElectionSnapshot, FleetSnapshot, GroupSnapshot, KeyWaiters, NamespaceSnapshot, ReaderSnapshot,
    ShardSnapshot, SnapshotCut, StreamSnapshot, MAX_SNAPSHOT_KEYS, MAX_SNAPSHOT_RECIPE_ROWS,
    MAX_SNAPSHOT_STREAM_ROWS, MAX_SNAPSHOT_WAITER_KEYS,
};
pub use stats::{Histogram, Stats};
pub use stream::{
    StreamEvent, StreamInfo, StreamRetention, StreamStart, StreamSubscription, SubscribeOptions,
    DEFAULT_PAGE_SIZE,
};
pub use subscription::Subscription;
pub use validate::{
    MAX_CHANNEL_BYTES, MAX_LIST_LIMIT, MAX_METADATA_BYTES, MAX_NAME_BYTES, MAX_POOL_SIZE, MAX_TTL,
    MIN_TTL,
};
pub use wording::{Durations, Fields, Style, Why};

/// The limits of docs/semantics.md (G11) and the conversions bindings use to check their own
/// numbers against them, so that no binding restates a range or its message; and the core's
/// words for what a binding cannot translate (an unpaired surrogate, a value JSON cannot hold).
pub mod limits {
    pub use crate::validate::{
        beyond_64_bits, claim_limit, duration_millis, duration_number, handoffs_per_period,
        integer_number, list_limit, not_json, page_size, permits, pool_size, publish_events,
        shards, stream_max_len, ttl_millis, ttl_number, unpaired_surrogate, TimeUnit,
        MAX_CHANNEL_BYTES, MAX_CLAIM_LIMIT, MAX_EVENT_BYTES, MAX_HANDOFFS_PER_PERIOD,
        MAX_LIST_LIMIT, MAX_METADATA_BYTES, MAX_NAME_BYTES, MAX_OFFER_KEYS, MAX_PAGE_SIZE,
        MAX_PERMITS, MAX_POOL_SIZE, MAX_PUBLISH_EVENTS, MAX_SAFE_INTEGER, MAX_SHARDS, MAX_TTL,
        MIN_TTL, OFFER_BATCH, RESERVED_CHANNEL_PREFIX,
    };
}

/// Re-exported so that metadata can be built without naming the crate separately.
pub use serde_json;
/// Re-exported: the token type of [`AcquireOptions::cancel`].
pub use tokio_util::sync::CancellationToken;

pub use metadata::Metadata;

/// The SQL that creates or upgrades accord's schema, for DBAs who apply it by hand. After it
/// ran, clients need only DML rights (connect with `ClientOptions::migrate(false)`).
pub fn migration_sql(schema: &str) -> Result<String> {
    validate::schema(schema)?;
    Ok(backend::postgres::sql::migration_script(schema))
}

/// Every statement the PostgreSQL backend prepares, by name (`acquire`, `acquire_batch`, `acquire_queued`,
/// `leave_queue`, `release_shared`, `holder`, `renew`, `renew_batch`, `release`, `done`,
/// `release_batch`, `done_batch`, `reset`, `list`, `notify`, `offer`, `claim`, `counts`; the streams' `publish`, `read_stream`, `stream_state`, `set_retention`,
/// `trim_stream`, `ack`, `acked`), for
/// DBAs reviewing what accord runs and for the benchmarks, which send the same text raw as the
/// floor accord is measured against. The statements that free a key or change a line
/// (`release`, `done`, their batches, `release_shared`, `leave_queue`, `offer`) take the
/// schema's wakeup channel ([`wakeup_channel`]) as a parameter.
pub fn statements(schema: &str) -> Result<Vec<(&'static str, String)>> {
    validate::schema(schema)?;
    let sql = backend::postgres::sql::Sql::new(schema);
    Ok(vec![
        ("acquire", sql.acquire),
        ("acquire_batch", sql.acquire_batch),
        ("acquire_queued", sql.acquire_queued),
        ("leave_queue", sql.leave_queue),
        ("release_shared", sql.release_shared),
        ("holder", sql.holder),
        ("renew", sql.renew),
        ("renew_batch", sql.renew_batch),
        ("release", sql.release),
        ("done", sql.done),
        ("release_batch", sql.release_batch),
        ("done_batch", sql.done_batch),
        ("reset", sql.reset),
        ("list_keys", sql.list_keys),
        ("list_holders", sql.list_holders),
        ("notify", sql.notify.to_string()),
        ("notify_batch", sql.notify_batch.to_string()),
        ("offer", sql.offer),
        ("claim", sql.claim),
        ("counts", sql.counts),
        ("publish", sql.streams.publish),
        ("read_stream", sql.streams.read),
        ("stream_state", sql.streams.state),
        ("set_retention", sql.streams.set_retention),
        ("trim_stream", sql.streams.trim),
        ("ack", sql.streams.ack),
        ("acked", sql.streams.acked),
    ])
}

/// The PostgreSQL channel on which releases and `done` of this schema wake waiting acquires.
pub fn wakeup_channel(schema: &str) -> Result<String> {
    validate::schema(schema)?;
    Ok(backend::postgres::sql::wakeup_channel(schema))
}

/// The README's Rust quick start, compiled as a doc test so that it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeQuickStart;
