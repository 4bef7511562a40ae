//! The embedded backend: a SQLite file shared by the processes of one host (`sqlite:///path`),
//! or an in-process store (`memory:`). Each operation is one IMMEDIATE transaction, so SQLite's
//! write lock serializes grants across processes; time is the host's clock, which every process
//! on the host shares. Notifications are rows of an event table that listeners read when the
//! file changes (`PRAGMA data_version`, polled every few milliseconds, and nudged at once
//! within a process).

mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use self::store::{db_error, now_ms, Location, Store};
use super::{
    AcquireOutcome, AcquireRequest, Backend, BackendEvent, BatchItem, ClaimRequest, Claimed,
    DoneItem, EventSink, Granted, LeaseRef, Renewed, ResetOutcome,
};
use crate::error::{Error, Result};
use crate::metadata::Metadata;
use crate::options::{KeyState, LeaseInfo, ListPage, ListQuery, PoolCounts, StateFilter};
use crate::rules::{self, Grantable, StoredKey};

const WAKEUP_CHANNEL: &str = "accord_wakeup";
/// How often a listener looks for changes made by other processes.
const POLL_EVERY: Duration = Duration::from_millis(5);
/// Transactions slower than this (queueing included) are reported.
const SLOW: Duration = Duration::from_millis(500);
/// Events older than this are deleted (listeners read them within milliseconds).
const EVENT_RETENTION_MS: i64 = 60_000;

/// An event row: id, channel, payload.
type StoredEvent = (i64, String, String);
/// What one read of the event table gives: the newest id, the data version, the new events.
type EventsRead = (i64, i64, Vec<StoredEvent>);

fn time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

fn parse_metadata(text: &str) -> Result<Metadata> {
    serde_json::from_str(text)
        .map_err(|e| Error::internal(format!("stored metadata is not a JSON object: {e}")))
}

/// `rules::merge_metadata` on stored text.
fn merge(base: &str, patch: Option<&str>) -> Result<(String, Metadata)> {
    let mut merged = parse_metadata(base)?;
    if let Some(patch) = patch {
        rules::merge_metadata(&mut merged, parse_metadata(patch)?);
    }
    Ok((
        serde_json::to_string(&merged).unwrap_or_else(|_| "{}".into()),
        merged,
    ))
}

fn wakeup_payload(namespace: &str, key: &str) -> String {
    serde_json::to_string(&(namespace, key)).unwrap_or_default()
}

pub(crate) struct SqliteBackend {
    store: Arc<Store>,
    listener: Arc<Listener>,
}

impl SqliteBackend {
    pub async fn connect(url: &str, sink: Arc<dyn EventSink>) -> Result<SqliteBackend> {
        let location = Location::parse(url)?;
        let store = tokio::task::spawn_blocking(move || Store::open(&location))
            .await
            .map_err(|e| Error::internal(format!("SQLite task failed: {e}")))??;
        tracing::info!(target: "accord", store = ?store.location, "connected");
        Ok(SqliteBackend {
            listener: Arc::new(Listener {
                store: store.clone(),
                sink,
                channels: Mutex::new(HashMap::new()),
                started: OnceCell::new(),
                shutdown: CancellationToken::new(),
            }),
            store,
        })
    }

    async fn write<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&rusqlite::Transaction<'_>, i64) -> Result<(T, bool)> + Send + 'static,
    ) -> Result<T> {
        self.write_unless(what, |_, _| Ok(None), f).await
    }

    /// [`Self::write`], unless `answer`, a read outside any transaction, already gives the
    /// answer: then nothing takes the write lock.
    async fn write_unless<T: Send + 'static>(
        &self,
        what: &'static str,
        answer: impl FnOnce(&Connection, i64) -> Result<Option<T>> + Send + 'static,
        f: impl FnOnce(&rusqlite::Transaction<'_>, i64) -> Result<(T, bool)> + Send + 'static,
    ) -> Result<T> {
        let nudge = self.store.nudge.clone();
        let queued = std::time::Instant::now();
        let (value, evented) = self
            .store
            .with(move |conn| {
                if let Some(value) = answer(conn, now_ms())? {
                    return Ok((value, false));
                }
                let started = std::time::Instant::now();
                let waited = started - queued;
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(|e| db_error(what, e))?;
                let result = f(&tx, now_ms())?;
                tx.commit().map_err(|e| db_error(what, e))?;
                let ran = started.elapsed();
                if waited + ran >= SLOW {
                    tracing::warn!(target: "accord", operation = what, waited_ms = waited.as_millis() as u64, ran_ms = ran.as_millis() as u64, "slow statement");
                }
                Ok(result)
            })
            .await?;
        if evented {
            nudge.send_modify(|n| *n = n.wrapping_add(1));
        }
        Ok(value)
    }
}

/// A stored key, as the rules in `crate::rules` read it, plus its metadata text.
struct KeyRow {
    pool: Option<String>,
    owner: Option<String>,
    fence: i64,
    expires_at_ms: Option<i64>,
    done: bool,
    attempt: Option<i64>,
    metadata: String,
}

impl KeyRow {
    fn view(&self) -> StoredKey<'_> {
        StoredKey {
            owner: self.owner.as_deref(),
            fence: self.fence,
            expires_at_ms: self.expires_at_ms,
            done: self.done,
            attempt: self.attempt,
        }
    }
}

fn read_key(conn: &Connection, ns: &str, key: &str, what: &str) -> Result<Option<KeyRow>> {
    conn.query_row(
        "SELECT owner, fence, expires_at_ms, done, attempt, metadata, pool FROM leases
          WHERE namespace = ?1 AND key = ?2",
        params![ns, key],
        |r| {
            Ok(KeyRow {
                owner: r.get(0)?,
                fence: r.get(1)?,
                expires_at_ms: r.get(2)?,
                done: r.get(3)?,
                attempt: r.get(4)?,
                metadata: r.get(5)?,
                pool: r.get(6)?,
            })
        },
    )
    .optional()
    .map_err(|e| db_error(what, e))
}

/// The key's metadata if this grant still holds it, live (`rules::holds`).
fn live_metadata(
    tx: &Connection,
    (ns, key, owner, fence): (&str, &str, &str, i64),
    now: i64,
    what: &str,
) -> Result<Option<String>> {
    Ok(read_key(tx, ns, key, what)?
        .filter(|row| rules::holds(&row.view(), owner, fence, now))
        .map(|row| row.metadata))
}

/// What an acquire finds on a key.
enum Look {
    /// Held by someone else, or done: nothing is to be written.
    Refused(AcquireOutcome),
    /// Free, expired, or granted to this very attempt; with the row's metadata if it exists.
    Grantable(Option<String>),
}

fn look(conn: &Connection, ns: &str, key: &str, attempt: i64, now: i64) -> Result<Look> {
    let row = read_key(conn, ns, key, "acquire")?;
    Ok(
        match rules::grantable(row.as_ref().map(KeyRow::view).as_ref(), attempt, now) {
            Grantable::Done => Look::Refused(AcquireOutcome::Done),
            Grantable::Held(remaining) => Look::Refused(AcquireOutcome::Held {
                remaining: Some(remaining),
            }),
            Grantable::Yes => Look::Grantable(row.map(|r| r.metadata)),
        },
    )
}

/// The next value of the fence sequence (grants and offers share it, as on PostgreSQL).
fn next_fence(tx: &Connection, what: &str) -> Result<i64> {
    tx.query_row(
        "UPDATE fence_seq SET value = value + 1 WHERE id = 1 RETURNING value",
        [],
        |r| r.get(0),
    )
    .map_err(|e| db_error(what, e))
}

/// What a claim finds in a pool: up to `limit` grantable keys (`rules::grantable`), oldest
/// offer first, with their metadata; and how long until the soonest holder expires.
struct PoolLook {
    keys: Vec<(String, String)>,
    next_expiry: Option<Duration>,
}

fn look_pool(
    conn: &Connection,
    ns: &str,
    pool: &str,
    below: Option<&str>,
    attempt: i64,
    limit: usize,
    now: i64,
) -> Result<PoolLook> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT key, owner, fence, expires_at_ms, attempt, metadata FROM leases
              WHERE namespace = ?1 AND pool = ?2 AND done = 0 AND (?3 IS NULL OR key < ?3)
              ORDER BY offered",
        )
        .map_err(|e| db_error("claim", e))?;
    let mut rows = stmt
        .query(params![ns, pool, below])
        .map_err(|e| db_error("claim", e))?;
    let mut look = PoolLook {
        keys: Vec::new(),
        next_expiry: None,
    };
    while let Some(row) = rows.next().map_err(|e| db_error("claim", e))? {
        let get = |e| db_error("claim", e);
        let owner: Option<String> = row.get(1).map_err(get)?;
        let stored = StoredKey {
            owner: owner.as_deref(),
            fence: row.get(2).map_err(get)?,
            expires_at_ms: row.get(3).map_err(get)?,
            done: false,
            attempt: row.get(4).map_err(get)?,
        };
        match rules::grantable(Some(&stored), attempt, now) {
            Grantable::Yes if look.keys.len() < limit => {
                look.keys
                    .push((row.get(0).map_err(get)?, row.get(5).map_err(get)?));
            }
            Grantable::Held(left) => {
                look.next_expiry = Some(look.next_expiry.map_or(left, |n| n.min(left)));
            }
            _ => {}
        }
    }
    if !look.keys.is_empty() {
        look.next_expiry = None;
    }
    Ok(look)
}

fn add_event(tx: &Connection, channel: &str, payload: &str, now: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO events (channel, payload, created_at_ms) VALUES (?1, ?2, ?3)",
        params![channel, payload, now],
    )
    .map_err(|e| db_error("notify", e))?;
    Ok(())
}

/// Frees `key` if grant `fence` of `owner` holds it: (recorded, wake-up stored).
fn release_one(
    tx: &Connection,
    ns: &str,
    owner: &str,
    key: &str,
    fence: i64,
    now: i64,
) -> Result<(bool, bool)> {
    let Some(row) = read_key(tx, ns, key, "release")? else {
        return Ok((false, false));
    };
    if rules::holds(&row.view(), owner, fence, now) {
        tx.execute(
            "UPDATE leases SET owner = NULL, expires_at_ms = NULL, attempt = NULL,
                               updated_at_ms = ?3
              WHERE namespace = ?1 AND key = ?2",
            params![ns, key, now],
        )
        .map_err(|e| db_error("release", e))?;
        add_event(tx, WAKEUP_CHANNEL, &wakeup_payload(ns, key), now)?;
        return Ok((true, true));
    }
    Ok((rules::released_by(&row.view(), fence), false))
}

/// Marks `key` done if grant `fence` of `owner` holds it: (merged metadata, wake-up stored).
fn done_one(
    tx: &Connection,
    ns: &str,
    owner: &str,
    key: &str,
    fence: i64,
    metadata: Option<&str>,
    now: i64,
) -> Result<(Option<Metadata>, bool)> {
    let Some(row) = read_key(tx, ns, key, "done")? else {
        return Ok((None, false));
    };
    if !rules::holds(&row.view(), owner, fence, now) {
        // A retry that finds the key done by this very grant succeeds.
        return if rules::done_by(&row.view(), owner, fence) {
            Ok((Some(parse_metadata(&row.metadata)?), false))
        } else {
            Ok((None, false))
        };
    }
    let (text, merged) = merge(&row.metadata, metadata)?;
    tx.execute(
        "UPDATE leases SET done = 1, expires_at_ms = NULL, attempt = NULL, metadata = ?3,
                           updated_at_ms = ?4
          WHERE namespace = ?1 AND key = ?2",
        params![ns, key, text, now],
    )
    .map_err(|e| db_error("done", e))?;
    let wakes = rules::done_wakes(row.pool.as_deref());
    if wakes {
        add_event(tx, WAKEUP_CHANNEL, &wakeup_payload(ns, key), now)?;
    }
    Ok((Some(merged), wakes))
}

#[async_trait]
impl Backend for SqliteBackend {
    async fn acquire(&self, r: &AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let (ns, key, owner) = (
            r.namespace.to_string(),
            r.key.to_string(),
            r.owner.to_string(),
        );
        let (ttl, attempt) = (r.ttl.as_millis() as i64, r.attempt);
        let metadata = r.metadata.map(str::to_string);
        let (ns_read, key_read) = (ns.clone(), key.clone());
        // A refusal writes nothing: it is decided by a plain read, without the write lock, and
        // decided again under the lock for a key that looked free.
        let refused =
            move |conn: &Connection, now: i64| match look(conn, &ns_read, &key_read, attempt, now)?
            {
                Look::Refused(outcome) => Ok(Some(outcome)),
                Look::Grantable(_) => Ok(None),
            };
        self.write_unless("acquire", refused, move |tx, now| {
            let base = match look(tx, &ns, &key, attempt, now)? {
                Look::Refused(outcome) => return Ok((outcome, false)),
                Look::Grantable(base) => base.unwrap_or_else(|| "{}".to_string()),
            };
            let fence = next_fence(tx, "acquire")?;
            let (text, merged) = merge(&base, metadata.as_deref())?;
            let expires = now + ttl;
            tx.execute(
                "INSERT INTO leases (namespace, key, owner, fence, attempt, expires_at_ms, done,
                                     metadata, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8)
                 ON CONFLICT (namespace, key) DO UPDATE SET
                   owner = excluded.owner, fence = excluded.fence, attempt = excluded.attempt,
                   expires_at_ms = excluded.expires_at_ms, done = 0,
                   metadata = excluded.metadata, updated_at_ms = excluded.updated_at_ms",
                params![ns, key, owner, fence, attempt, expires, text, now],
            )
            .map_err(|e| db_error("acquire", e))?;
            Ok((
                AcquireOutcome::Granted(Granted {
                    fence,
                    expires_at: time(expires),
                    metadata: merged,
                }),
                false,
            ))
        })
        .await
    }

    async fn renew(
        &self,
        l: LeaseRef<'_>,
        ttl: Duration,
        metadata: Option<&str>,
    ) -> Result<Option<Renewed>> {
        let (ns, key, owner, fence) = (
            l.namespace.to_string(),
            l.key.to_string(),
            l.owner.to_string(),
            l.fence,
        );
        let ttl = ttl.as_millis() as i64;
        let metadata = metadata.map(str::to_string);
        self.write("renew", move |tx, now| {
            let base = live_metadata(tx, (&ns, &key, &owner, fence), now, "renew")?;
            let Some(base) = base else {
                return Ok((None, false));
            };
            let (text, merged) = merge(&base, metadata.as_deref())?;
            tx.execute(
                "UPDATE leases SET expires_at_ms = ?3, metadata = ?4, updated_at_ms = ?5
                  WHERE namespace = ?1 AND key = ?2",
                params![ns, key, now + ttl, text, now],
            )
            .map_err(|e| db_error("renew", e))?;
            Ok((
                Some(Renewed {
                    expires_at: time(now + ttl),
                    metadata: merged,
                }),
                false,
            ))
        })
        .await
    }

    async fn renew_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[BatchItem],
    ) -> Result<Vec<(i64, DateTime<Utc>)>> {
        let (ns, owner) = (namespace.to_string(), owner.to_string());
        let batch = serde_json::to_string(
            &items
                .iter()
                .map(|i| (i.key.as_str(), i.fence, i.ttl.as_millis() as i64))
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default();
        // One statement for the whole tick (G3), as on PostgreSQL.
        self.write("keepalive", move |tx, now| {
            let mut stmt = tx
                .prepare_cached(
                    // The batch is parsed once (MATERIALIZED) and drives the join through the primary
                    // key: without it SQLite re-read the JSON for every row (500 ms for 1,000).
                    "WITH b (key, fence, ttl) AS MATERIALIZED (
                       SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?3))
                     UPDATE leases SET expires_at_ms = ?4 + b.ttl, updated_at_ms = ?4
                       FROM b
                      WHERE leases.namespace = ?1 AND leases.key = b.key AND leases.owner = ?2
                        AND leases.fence = b.fence AND leases.done = 0 AND leases.expires_at_ms > ?4
                  RETURNING leases.fence, leases.expires_at_ms",
                )
                .map_err(|e| db_error("keepalive", e))?;
            let rows = stmt
                .query_map(params![ns, owner, batch, now], |r| {
                    Ok((r.get::<_, i64>(0)?, time(r.get::<_, i64>(1)?)))
                })
                .map_err(|e| db_error("keepalive", e))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(|e| db_error("keepalive", e))?;
            Ok((rows, false))
        })
        .await
    }

    async fn release(&self, l: LeaseRef<'_>) -> Result<bool> {
        let (ns, key, owner, fence) = (
            l.namespace.to_string(),
            l.key.to_string(),
            l.owner.to_string(),
            l.fence,
        );
        self.write("release", move |tx, now| {
            release_one(tx, &ns, &owner, &key, fence, now)
        })
        .await
    }

    async fn done(&self, l: LeaseRef<'_>, metadata: Option<&str>) -> Result<Option<Metadata>> {
        let (ns, key, owner, fence) = (
            l.namespace.to_string(),
            l.key.to_string(),
            l.owner.to_string(),
            l.fence,
        );
        let metadata = metadata.map(str::to_string);
        self.write("done", move |tx, now| {
            done_one(tx, &ns, &owner, &key, fence, metadata.as_deref(), now)
        })
        .await
    }

    // The batches take the write lock once: one transaction (one commit) for every lease.
    async fn release_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[(String, i64)],
    ) -> Result<Vec<i64>> {
        let (ns, owner, items) = (namespace.to_string(), owner.to_string(), items.to_vec());
        self.write("release", move |tx, now| {
            let mut recorded = Vec::new();
            let mut evented = false;
            for (key, fence) in &items {
                let (held, woke) = release_one(tx, &ns, &owner, key, *fence, now)?;
                evented |= woke;
                if held {
                    recorded.push(*fence);
                }
            }
            Ok((recorded, evented))
        })
        .await
    }

    async fn done_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[DoneItem],
    ) -> Result<Vec<(i64, Metadata)>> {
        let (ns, owner) = (namespace.to_string(), owner.to_string());
        let items: Vec<(String, i64, Option<String>)> = items
            .iter()
            .map(|i| (i.key.clone(), i.fence, i.metadata.clone()))
            .collect();
        self.write("done", move |tx, now| {
            let mut finished = Vec::new();
            let mut evented = false;
            for (key, fence, metadata) in &items {
                let (merged, woke) =
                    done_one(tx, &ns, &owner, key, *fence, metadata.as_deref(), now)?;
                evented |= woke;
                if let Some(merged) = merged {
                    finished.push((*fence, merged));
                }
            }
            Ok((finished, evented))
        })
        .await
    }

    async fn reset(&self, namespace: &str, key: &str) -> Result<ResetOutcome> {
        let (ns, key) = (namespace.to_string(), key.to_string());
        self.write("reset", move |tx, now| {
            let outcome = match read_key(tx, &ns, &key, "reset")? {
                None => ResetOutcome::NotFound,
                // A live lease is never reset: its holder would keep believing it holds the key.
                Some(row) if rules::key_state(&row.view(), now) == KeyState::Held => {
                    ResetOutcome::Held
                }
                Some(_) => {
                    tx.execute(
                        "DELETE FROM leases WHERE namespace = ?1 AND key = ?2",
                        params![ns, key],
                    )
                    .map_err(|e| db_error("reset", e))?;
                    ResetOutcome::Reset
                }
            };
            Ok((outcome, false))
        })
        .await
    }

    async fn list(&self, namespace: &str, q: &ListQuery) -> Result<ListPage> {
        let ns = namespace.to_string();
        let q = q.clone();
        let cursor = q.cursor_fence()?;
        self.store
            .with(move |conn| {
                let now = now_ms();
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT key, owner, fence, expires_at_ms, done, metadata, updated_at_ms
                           FROM leases
                          WHERE namespace = ?1
                            AND (?2 IS NULL OR substr(key, 1, length(?2)) = ?2)
                            AND (?3 IS NULL OR fence < ?3)
                          ORDER BY fence DESC",
                    )
                    .map_err(|e| db_error("list", e))?;
                let mut rows = stmt
                    .query(params![ns, q.prefix, cursor])
                    .map_err(|e| db_error("list", e))?;
                let mut items = Vec::new();
                let mut more = false;
                while let Some(row) = rows.next().map_err(|e| db_error("list", e))? {
                    let done: bool = row.get(4).map_err(|e| db_error("list", e))?;
                    let expires: Option<i64> = row.get(3).map_err(|e| db_error("list", e))?;
                    let owner: Option<String> = row.get(1).map_err(|e| db_error("list", e))?;
                    let fence: i64 = row.get(2).map_err(|e| db_error("list", e))?;
                    let state = rules::key_state(
                        &StoredKey {
                            owner: owner.as_deref(),
                            fence,
                            expires_at_ms: expires,
                            done,
                            attempt: None,
                        },
                        now,
                    );
                    if matches!(q.state, StateFilter::Only(s) if s != state) {
                        continue;
                    }
                    let metadata =
                        parse_metadata(&row.get::<_, String>(5).map_err(|e| db_error("list", e))?)?;
                    if let Some(filter) = &q.metadata {
                        if !rules::metadata_contains(&metadata, filter) {
                            continue;
                        }
                    }
                    if items.len() == q.limit {
                        more = true;
                        break;
                    }
                    items.push(LeaseInfo {
                        key: row.get(0).map_err(|e| db_error("list", e))?,
                        state,
                        owner: if state == KeyState::Free { None } else { owner },
                        fence,
                        expires_at: if state == KeyState::Held {
                            expires.map(time)
                        } else {
                            None
                        },
                        metadata,
                        updated_at: time(row.get(6).map_err(|e| db_error("list", e))?),
                    });
                }
                let next_cursor = if more {
                    items.last().map(|i| i.fence.to_string())
                } else {
                    None
                };
                Ok(ListPage { items, next_cursor })
            })
            .await
    }

    async fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        let (channel, payload) = (channel.to_string(), payload.to_string());
        self.write("notify", move |tx, now| {
            add_event(tx, &channel, &payload, now)?;
            Ok(((), true))
        })
        .await
    }

    async fn offer(
        &self,
        namespace: &str,
        pool: &str,
        keys: &[String],
        metadata: Option<&str>,
    ) -> Result<u64> {
        let (ns, pool, keys) = (namespace.to_string(), pool.to_string(), keys.to_vec());
        let metadata = metadata.unwrap_or("{}").to_string();
        self.write("offer", move |tx, now| {
            let mut joined = 0u64;
            for key in &keys {
                // As on PostgreSQL: a new key joins free; a key in no pool joins as it is; a
                // key already in a pool stays as it is.
                let row: Option<Option<String>> = tx
                    .query_row(
                        "SELECT pool FROM leases WHERE namespace = ?1 AND key = ?2",
                        params![ns, key],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(|e| db_error("offer", e))?;
                match row {
                    Some(Some(_)) => continue,
                    Some(None) => {
                        let seq = next_fence(tx, "offer")?;
                        tx.execute(
                            "UPDATE leases SET pool = ?3, offered = ?4, updated_at_ms = ?5
                              WHERE namespace = ?1 AND key = ?2",
                            params![ns, key, pool, seq, now],
                        )
                        .map_err(|e| db_error("offer", e))?;
                    }
                    None => {
                        let seq = next_fence(tx, "offer")?;
                        tx.execute(
                            "INSERT INTO leases (namespace, key, fence, done, metadata, updated_at_ms,
                                                 pool, offered)
                             VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, ?3)",
                            params![ns, key, seq, metadata, now, pool],
                        )
                        .map_err(|e| db_error("offer", e))?;
                    }
                }
                joined += 1;
            }
            if joined > 0 {
                add_event(tx, WAKEUP_CHANNEL, &wakeup_payload(&ns, &pool), now)?;
            }
            Ok((joined, joined > 0))
        })
        .await
    }

    async fn claim(&self, r: &ClaimRequest<'_>) -> Result<Claimed> {
        let (ns, pool, owner) = (
            r.namespace.to_string(),
            r.pool.to_string(),
            r.owner.to_string(),
        );
        let below = r.below.map(str::to_string);
        let (limit, ttl, attempt) = (r.limit, r.ttl.as_millis() as i64, r.attempt);
        let metadata = r.metadata.map(str::to_string);
        let (ns_read, pool_read, below_read) = (ns.clone(), pool.clone(), below.clone());
        // An empty claim writes nothing: decided by a plain read, and again under the lock.
        let nothing = move |conn: &Connection, now: i64| {
            let look = look_pool(
                conn,
                &ns_read,
                &pool_read,
                below_read.as_deref(),
                attempt,
                1,
                now,
            )?;
            Ok(look.keys.is_empty().then_some(Claimed {
                granted: Vec::new(),
                next_expiry: look.next_expiry,
            }))
        };
        // One writer at a time holds the store, so no claimer can meet another's rows half
        // granted: what SKIP LOCKED does on PostgreSQL, the write lock does here.
        self.write_unless("claim", nothing, move |tx, now| {
            let look = look_pool(tx, &ns, &pool, below.as_deref(), attempt, limit, now)?;
            let mut granted = Vec::with_capacity(look.keys.len());
            for (key, base) in look.keys {
                let fence = next_fence(tx, "claim")?;
                let (text, merged) = merge(&base, metadata.as_deref())?;
                let expires = now + ttl;
                tx.execute(
                    "UPDATE leases SET owner = ?3, fence = ?4, attempt = ?5, expires_at_ms = ?6,
                                       metadata = ?7, updated_at_ms = ?8
                      WHERE namespace = ?1 AND key = ?2",
                    params![ns, key, owner, fence, attempt, expires, text, now],
                )
                .map_err(|e| db_error("claim", e))?;
                granted.push((
                    key,
                    Granted {
                        fence,
                        expires_at: time(expires),
                        metadata: merged,
                    },
                ));
            }
            Ok((
                Claimed {
                    granted,
                    next_expiry: look.next_expiry,
                },
                false,
            ))
        })
        .await
    }

    async fn counts(&self, namespace: &str, pool: &str) -> Result<PoolCounts> {
        let (ns, pool) = (namespace.to_string(), pool.to_string());
        self.store
            .with(move |conn| {
                let now = now_ms();
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT owner, fence, expires_at_ms, done FROM leases
                          WHERE namespace = ?1 AND pool = ?2",
                    )
                    .map_err(|e| db_error("counts", e))?;
                let mut rows = stmt
                    .query(params![ns, pool])
                    .map_err(|e| db_error("counts", e))?;
                let mut counts = PoolCounts::default();
                while let Some(row) = rows.next().map_err(|e| db_error("counts", e))? {
                    let owner: Option<String> = row.get(0).map_err(|e| db_error("counts", e))?;
                    let key = StoredKey {
                        owner: owner.as_deref(),
                        fence: row.get(1).map_err(|e| db_error("counts", e))?,
                        expires_at_ms: row.get(2).map_err(|e| db_error("counts", e))?,
                        done: row.get(3).map_err(|e| db_error("counts", e))?,
                        attempt: None,
                    };
                    match rules::key_state(&key, now) {
                        KeyState::Free => counts.free += 1,
                        KeyState::Held => counts.held += 1,
                        KeyState::Done => counts.done += 1,
                    }
                }
                Ok(counts)
            })
            .await
    }

    fn max_payload(&self) -> usize {
        super::MAX_PAYLOAD
    }

    async fn listen(&self, channel: &str) -> Result<()> {
        *self
            .listener
            .channels
            .lock()
            .unwrap()
            .entry(channel.to_string())
            .or_insert(0) += 1;
        self.listener.start().await
    }

    async fn unlisten(&self, channel: &str) {
        let mut channels = self.listener.channels.lock().unwrap();
        if let Some(count) = channels.get_mut(channel) {
            *count -= 1;
            if *count == 0 {
                channels.remove(channel);
            }
        }
    }

    async fn watch_wakeups(&self) -> Result<()> {
        self.listener.start().await
    }

    async fn listening_channels(&self) -> Result<Vec<String>> {
        Ok(self
            .listener
            .channels
            .lock()
            .unwrap()
            .keys()
            .cloned()
            .collect())
    }

    fn close(&self) {
        self.listener.shutdown.cancel();
    }
}

/// Reads new events and hands them to the core: started on first need, like PostgreSQL's
/// listening connection.
struct Listener {
    store: Arc<Store>,
    sink: Arc<dyn EventSink>,
    channels: Mutex<HashMap<String, usize>>,
    started: OnceCell<()>,
    shutdown: CancellationToken,
}

impl Listener {
    /// Starts the reader with its cursor at the newest event: anything committed after this
    /// returns is delivered.
    async fn start(self: &Arc<Self>) -> Result<()> {
        self.started
            .get_or_try_init(|| async {
                let reader = match &self.store.location {
                    Location::File(_) => {
                        let location = self.store.location.clone();
                        let conn = tokio::task::spawn_blocking(move || Store::connect(&location))
                            .await
                            .map_err(|e| Error::internal(format!("SQLite task failed: {e}")))??;
                        Some(Arc::new(Mutex::new(conn)))
                    }
                    Location::Memory(_) => None,
                };
                let this = self.clone();
                let cursor = this.read(reader.clone(), None).await?.0;
                tokio::spawn(async move { this.run(reader, cursor).await });
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// One read on the listener's connection (or the store's, for memory): the data version
    /// and the events after `cursor` (with `None`, only the newest id).
    async fn read(
        &self,
        reader: Option<Arc<Mutex<Connection>>>,
        cursor: Option<i64>,
    ) -> Result<EventsRead> {
        match reader {
            Some(reader) => tokio::task::spawn_blocking(move || {
                read_events(&reader.lock().unwrap_or_else(|e| e.into_inner()), cursor)
            })
            .await
            .map_err(|e| Error::internal(format!("SQLite task failed: {e}")))?,
            None => self.store.with(move |conn| read_events(conn, cursor)).await,
        }
    }

    async fn run(self: Arc<Self>, reader: Option<Arc<Mutex<Connection>>>, mut cursor: i64) {
        let mut version = -1;
        let mut nudged = self.store.nudge.subscribe();
        let mut last_cleanup = now_ms();
        loop {
            match self.read(reader.clone(), Some(cursor)).await {
                Ok((newest, v, events)) => {
                    version = v;
                    cursor = newest;
                    self.deliver(events);
                }
                Err(e) => tracing::warn!(target: "accord", error = %e, "reading events failed"),
            }
            if now_ms() - last_cleanup > EVENT_RETENTION_MS / 6 {
                last_cleanup = now_ms();
                let cutoff = last_cleanup - EVENT_RETENTION_MS;
                let _ = self
                    .store
                    .with(move |c| {
                        c.execute("DELETE FROM events WHERE created_at_ms < ?1", [cutoff])
                            .map_err(|e| db_error("event cleanup", e))
                    })
                    .await;
            }
            // Sleep until nudged (a commit in this process) or until the file may have changed.
            loop {
                tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    _ = nudged.changed() => break,
                    // memory: (no reader) only this process writes, and it nudges.
                    _ = tokio::time::sleep(POLL_EVERY), if reader.is_some() => {
                        match self.read(reader.clone(), None).await {
                            Ok((_, v, _)) if v == version => continue,
                            _ => break,
                        }
                    }
                }
            }
        }
    }

    fn deliver(&self, events: Vec<StoredEvent>) {
        deliver_to(&self.sink, &self.channels, events)
    }
}

/// The data version and the events after `cursor` (with `None`, only the newest id).
fn read_events(conn: &Connection, cursor: Option<i64>) -> Result<EventsRead> {
    let version: i64 = conn
        .query_row("PRAGMA data_version", [], |r| r.get(0))
        .map_err(|e| db_error("listen", e))?;
    let Some(after) = cursor else {
        let newest: i64 = conn
            .query_row("SELECT COALESCE(max(id), 0) FROM events", [], |r| r.get(0))
            .map_err(|e| db_error("listen", e))?;
        return Ok((newest, version, Vec::new()));
    };
    let mut stmt = conn
        .prepare_cached("SELECT id, channel, payload FROM events WHERE id > ?1 ORDER BY id")
        .map_err(|e| db_error("listen", e))?;
    let events = stmt
        .query_map([after], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .map_err(|e| db_error("listen", e))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(|e| db_error("listen", e))?;
    let newest = events.last().map_or(after, |e: &StoredEvent| e.0);
    Ok((newest, version, events))
}

fn deliver_to(
    sink: &Arc<dyn EventSink>,
    channels: &Mutex<HashMap<String, usize>>,
    events: Vec<StoredEvent>,
) {
    if events.is_empty() {
        return;
    }
    let channels = channels.lock().unwrap().clone();
    for (_, channel, payload) in events {
        if channel == WAKEUP_CHANNEL {
            if let Ok((namespace, key)) = serde_json::from_str::<(String, String)>(&payload) {
                sink.deliver(BackendEvent::Wakeup { namespace, key });
            }
        } else if channels.contains_key(&channel) {
            sink.deliver(BackendEvent::Notification { channel, payload });
        }
    }
}
