//! The embedded backend: a SQLite file shared by the processes of one host (`sqlite:///path`),
//! or an in-process store (`memory:`). Each operation is one IMMEDIATE transaction, so SQLite's
//! write lock serializes grants across processes; time is the host's clock, which every process
//! on the host shares. Notifications are rows of an event table that listeners read when the
//! file changes (`PRAGMA data_version`, polled every few milliseconds, and nudged at once
//! within a process).

mod store;
mod streams;

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
    parse_wakeup, wakeup_payload, AcquireItem, AcquireOutcome, AcquireRequest, Backend,
    BackendEvent, BatchItem, ClaimRequest, Claimed, DoneItem, EventSink, Granted, Holder,
    KeyWaiters, LeaseRef, Renewed, ResetOutcome, SnapshotRows, StreamRow,
};
use crate::error::{Error, Result};
use crate::metadata::Metadata;
use crate::options::{
    KeyCounts, KeyState, LeaseInfo, ListPage, ListQuery, ListRange, PoolCounts, StateFilter,
};
use crate::rules::{self, Grantable, StoredKey, Waiting};
use crate::stats::{Counter, Recorder, Timer};

const WAKEUP_CHANNEL: &str = "accord_wakeup";
/// The embedded store tags its wake-ups (`rules::wake_tag`) with an empty secret: it has no
/// roles, and whoever can read its events can read its keys. One payload format for both stores.
const WAKE_SECRET: &str = "";

/// The tag a wake-up of `key` (or of the pool `key`) carries.
fn tag(ns: &str, key: &str) -> String {
    rules::wake_tag(WAKE_SECRET, ns, key)
}
/// How often a listener looks for changes made by other processes.
const POLL_EVERY: Duration = Duration::from_millis(5);
/// Transactions slower than this (queueing included) are reported.
const SLOW: Duration = Duration::from_millis(500);
/// Events older than this are deleted (listeners read them within milliseconds).
const EVENT_RETENTION_MS: i64 = 60_000;

/// An event row: id, channel, payload.
type StoredEvent = (i64, String, String);
/// One row a list page considers: a key's own row, or a shared holder's granted ticket.
struct ListedRow {
    key: String,
    owner: Option<String>,
    fence: i64,
    expires_at_ms: Option<i64>,
    done: bool,
    metadata: String,
    updated_at_ms: i64,
    shared_until_ms: Option<i64>,
    shared: bool,
}

/// One page of `list` (`Backend::list`), read on `conn` at `now` (also inside the snapshot's
/// transaction).
/// The end of a prefix's range: a bound only when there is one (a statement each).
fn below_sql(range: &ListRange) -> &'static str {
    if range.below.is_some() {
        "AND key < ?3"
    } else {
        "AND ?3 IS NULL"
    }
}

/// The keys' rows of a page's range in primary-key order, read lazily: a page stops the scan.
/// ?1 the namespace, ?2 the range's start, ?3 its end.
fn keys_sql(range: &ListRange) -> String {
    let below = below_sql(range);
    // Held only: the keys that name an owner, through leases_owned; free or held: the keys
    // not done, through leases_undone (SQLite uses a partial index when the statement carries
    // its condition as written).
    let only = if range.owned_only {
        "AND owner IS NOT NULL AND NOT done"
    } else if range.undone_only {
        "AND NOT done"
    } else {
        ""
    };
    format!(
        "SELECT key, owner, fence, expires_at_ms, done, metadata, updated_at_ms, shared_until_ms
           FROM leases
          WHERE namespace = ?1 AND key >= ?2 {below} {only}
          ORDER BY key"
    )
}

fn list_in(
    conn: &Connection,
    ns: &str,
    q: &ListQuery,
    range: &ListRange,
    now: i64,
) -> Result<ListPage> {
    let e = |e| db_error("list", e);
    let mut keys = conn.prepare_cached(&keys_sql(range)).map_err(e)?;
    let below = below_sql(range);
    // Shared holders (granted tickets) in the same range, in (key, fence) order;
    // `ListPage::merged` puts the two in one order.
    let mut tickets = conn
        .prepare_cached(&format!(
            "SELECT key, owner, fence, expires_at_ms, 0, metadata, updated_at_ms,
                            NULL
                       FROM tickets
                      WHERE namespace = ?1 AND key >= ?2 {below}
                        AND granted = 1 AND expires_at_ms > ?4
                      ORDER BY key, fence"
        ))
        .map_err(e)?;
    // Keeps a row if the page wants it: after the cursor, not hidden behind shared
    // holders, in the state and with the metadata asked for.
    let keep = |row: ListedRow| -> Result<Option<LeaseInfo>> {
        if let Some((key, fence)) = &range.after {
            if (row.key.as_str(), row.fence) <= (key.as_str(), *fence) {
                return Ok(None);
            }
        }
        let stored = StoredKey {
            owner: row.owner.as_deref(),
            fence: row.fence,
            expires_at_ms: row.expires_at_ms,
            done: row.done,
            attempt: None,
            shared_until_ms: row.shared_until_ms,
        };
        if !row.shared && rules::held_by_shared(&stored, now) {
            return Ok(None);
        }
        let state = rules::key_state(&stored, now);
        if matches!(q.state, StateFilter::Only(s) if s != state) {
            return Ok(None);
        }
        let metadata = parse_metadata(&row.metadata)?;
        if let Some(filter) = &q.metadata {
            if !rules::metadata_contains(&metadata, filter) {
                return Ok(None);
            }
        }
        Ok(Some(LeaseInfo {
            key: row.key,
            state,
            owner: if state == KeyState::Free {
                None
            } else {
                row.owner
            },
            fence: row.fence,
            expires_at: if state == KeyState::Held {
                row.expires_at_ms.map(time)
            } else {
                None
            },
            metadata,
            updated_at: time(row.updated_at_ms),
            shared: row.shared,
        }))
    };
    // One more than asked tells whether another page follows.
    let wanted = q.limit + 1;
    let mut holders = Vec::new();
    let mut rows = tickets
        .query(params![ns, range.from, range.below, now])
        .map_err(e)?;
    while let Some(row) = rows.next().map_err(e)? {
        let listed = listed_row(row, true).map_err(e)?;
        holders.extend(keep(listed)?);
        if holders.len() == wanted {
            break;
        }
    }
    let mut keys_page = Vec::new();
    let mut rows = keys
        .query(params![ns, range.from, range.below])
        .map_err(e)?;
    while let Some(row) = rows.next().map_err(e)? {
        let listed = listed_row(row, false).map_err(e)?;
        keys_page.extend(keep(listed)?);
        if keys_page.len() == wanted {
            break;
        }
    }
    Ok(ListPage::merged(keys_page, holders, q.limit))
}

/// Every key in `range` by state, as `list_in` shows them (a key held by shared holders counts
/// once, as held), and the live shared holders.
fn count_in(conn: &Connection, ns: &str, range: &ListRange, now: i64) -> Result<KeyCounts> {
    let e = |e| db_error("count keys", e);
    let below = if range.below.is_some() {
        "AND key < ?3"
    } else {
        "AND ?3 IS NULL"
    };
    let mut counts = KeyCounts::default();
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT owner, fence, expires_at_ms, done, shared_until_ms FROM leases
              WHERE namespace = ?1 AND key >= ?2 {below}"
        ))
        .map_err(e)?;
    let mut rows = stmt
        .query(params![ns, range.from, range.below])
        .map_err(e)?;
    while let Some(row) = rows.next().map_err(e)? {
        let owner: Option<String> = row.get(0).map_err(e)?;
        let key = StoredKey {
            owner: owner.as_deref(),
            fence: row.get(1).map_err(e)?,
            expires_at_ms: row.get(2).map_err(e)?,
            done: row.get(3).map_err(e)?,
            attempt: None,
            shared_until_ms: row.get(4).map_err(e)?,
        };
        if rules::held_by_shared(&key, now) {
            counts.held += 1;
            continue;
        }
        match rules::key_state(&key, now) {
            KeyState::Free => counts.free += 1,
            KeyState::Held => counts.held += 1,
            KeyState::Done => counts.done += 1,
        }
    }
    let holders: i64 = conn
        .query_row(
            &format!(
                "SELECT count(*) FROM tickets
                  WHERE namespace = ?1 AND key >= ?2 {below}
                    AND granted = 1 AND expires_at_ms > ?4"
            ),
            params![ns, range.from, range.below, now],
            |r| r.get(0),
        )
        .map_err(e)?;
    counts.shared_holders = u64::try_from(holders).unwrap_or(0);
    Ok(counts)
}

/// Each key in `range` with acquires waiting in line (`rules::waits_in_line`), exclusive and
/// shared, in key order, up to `limit` keys; whether more keys follow; and every waiter in the
/// range. Reads the range's tickets in primary-key order (shared holders too: the rule, not
/// the statement, tells them apart), as PostgreSQL's `list_waiters` does.
fn waiters_in(
    conn: &Connection,
    ns: &str,
    range: &ListRange,
    limit: usize,
    now: i64,
) -> Result<(Vec<KeyWaiters>, bool, u64)> {
    let e = |e| db_error("list waiters", e);
    let below = if range.below.is_some() {
        "AND key < ?3"
    } else {
        "AND ?3 IS NULL"
    };
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT key, shared, granted, expires_at_ms FROM tickets
              WHERE namespace = ?1 AND key >= ?2 {below}
              ORDER BY key, ticket"
        ))
        .map_err(e)?;
    let mut rows = stmt
        .query(params![ns, range.from, range.below])
        .map_err(e)?;
    let (mut out, mut truncated, mut waiting) = (Vec::<KeyWaiters>::new(), false, 0u64);
    while let Some(row) = rows.next().map_err(e)? {
        let (granted, expires_at_ms): (bool, i64) =
            (row.get(2).map_err(e)?, row.get(3).map_err(e)?);
        if !rules::waits_in_line(granted, expires_at_ms, now) {
            continue;
        }
        waiting += 1;
        let key: String = row.get(0).map_err(e)?;
        let shared: bool = row.get(1).map_err(e)?;
        if out.last().is_none_or(|w| w.key != key) {
            if out.len() == limit {
                // Past the limit: only counted.
                truncated = true;
                continue;
            }
            out.push(KeyWaiters {
                key,
                exclusive: 0,
                shared: 0,
            });
        }
        if let Some(w) = out.last_mut() {
            if shared {
                w.shared += 1;
            } else {
                w.exclusive += 1;
            }
        }
    }
    Ok((out, truncated, waiting))
}

/// Each stream of the namespace with its bounds, once per named consumer (none: once alone);
/// up to `limit` rows, and whether more follow.
fn streams_in(conn: &Connection, ns: &str, limit: usize) -> Result<(Vec<StreamRow>, bool)> {
    let e = |e| db_error("list streams", e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT st.stream, st.last_seq,
                    COALESCE((SELECT min(ev.seq) FROM stream_events ev
                               WHERE ev.namespace = ?1 AND ev.stream = st.stream),
                             st.last_seq + 1),
                    a.consumer, a.seq
               FROM streams st
               LEFT JOIN stream_acks a ON a.namespace = st.namespace AND a.stream = st.stream
              WHERE st.namespace = ?1
              ORDER BY st.stream, a.consumer
              LIMIT ?2",
        )
        .map_err(e)?;
    let wanted = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
    let mut rows = stmt.query(params![ns, wanted]).map_err(e)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(e)? {
        let consumer: Option<String> = row.get(3).map_err(e)?;
        let acked: Option<i64> = row.get(4).map_err(e)?;
        out.push(StreamRow {
            stream: row.get(0).map_err(e)?,
            last_seq: row.get(1).map_err(e)?,
            first_seq: row.get(2).map_err(e)?,
            consumer: consumer.map(|c| (c, acked.unwrap_or(0))),
        });
    }
    let truncated = out.len() > limit;
    out.truncate(limit);
    Ok((out, truncated))
}

/// A list statement's row: key, owner, fence, expires_at_ms, done, metadata, updated_at_ms,
/// shared_until_ms.
fn listed_row(row: &rusqlite::Row<'_>, shared: bool) -> rusqlite::Result<ListedRow> {
    Ok(ListedRow {
        key: row.get(0)?,
        owner: row.get(1)?,
        fence: row.get(2)?,
        expires_at_ms: row.get(3)?,
        done: row.get(4)?,
        metadata: row.get(5)?,
        updated_at_ms: row.get(6)?,
        shared_until_ms: row.get(7)?,
        shared,
    })
}

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

pub(crate) struct SqliteBackend {
    store: Arc<Store>,
    listener: Arc<Listener>,
    /// Statements (transactions on the store) and their times: the client's stats.
    stats: Arc<Recorder>,
}

impl SqliteBackend {
    pub async fn connect(
        url: &str,
        sink: Arc<dyn EventSink>,
        stats: Arc<Recorder>,
    ) -> Result<SqliteBackend> {
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
            stats,
        })
    }

    /// One statement (a transaction or a read) on the store, counted and timed.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let started = std::time::Instant::now();
        let result = self.store.with(f).await;
        self.stats.add(Counter::Statements, 1);
        self.stats.time(Timer::StatementTime, started.elapsed());
        result
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
        let (value, evented) = self.run(move |conn| {
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

/// A grant's identity as owned values, for a statement that runs on another thread.
fn owned(l: LeaseRef<'_>) -> (String, String, String, i64) {
    (
        l.namespace.to_string(),
        l.key.to_string(),
        l.owner.to_string(),
        l.fence,
    )
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
    shared_holders: i64,
    shared_until_ms: Option<i64>,
    granted_at_ms: Option<i64>,
}

impl KeyRow {
    fn view(&self) -> StoredKey<'_> {
        StoredKey {
            owner: self.owner.as_deref(),
            fence: self.fence,
            expires_at_ms: self.expires_at_ms,
            done: self.done,
            attempt: self.attempt,
            shared_until_ms: self.shared_until_ms,
        }
    }
}

fn read_key(conn: &Connection, ns: &str, key: &str, what: &str) -> Result<Option<KeyRow>> {
    conn.query_row(
        "SELECT owner, fence, expires_at_ms, done, attempt, metadata, pool, shared_holders,
                shared_until_ms, granted_at_ms FROM leases
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
                shared_holders: r.get(7)?,
                shared_until_ms: r.get(8)?,
                granted_at_ms: r.get(9)?,
            })
        },
    )
    .optional()
    .map_err(|e| db_error(what, e))
}

/// The key's live waiting tickets, with their owners, first in line first.
fn waiting(conn: &Connection, ns: &str, key: &str, now: i64) -> Result<Vec<(Waiting, String)>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT ticket, shared, expires_at_ms, owner FROM tickets
              WHERE namespace = ?1 AND key = ?2 AND granted = 0 AND expires_at_ms > ?3
              ORDER BY ticket",
        )
        .map_err(|e| db_error("queue", e))?;
    let rows = stmt
        .query_map(params![ns, key, now], |r| {
            Ok((
                Waiting {
                    ticket: r.get(0)?,
                    shared: r.get(1)?,
                    expires_at_ms: r.get(2)?,
                },
                r.get(3)?,
            ))
        })
        .map_err(|e| db_error("queue", e))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(|e| db_error("queue", e))?;
    Ok(rows)
}

/// The most rows of each kind one sweep deletes (as the `sweep` statement's `LIMIT 1000`).
const SWEEP_LIMIT: usize = 1000;

/// Deletes the key's dead tickets (dead: waiters and shared holders that stopped
/// renewing, `rules::waits_in_line`), as PostgreSQL's `acquire_queued` and `reset` do.
fn delete_dead_tickets(tx: &Connection, ns: &str, key: &str, now: i64, what: &str) -> Result<()> {
    tx.execute(
        "DELETE FROM tickets WHERE namespace = ?1 AND key = ?2 AND expires_at_ms <= ?3",
        params![ns, key, now],
    )
    .map_err(|e| db_error(what, e))?;
    Ok(())
}

/// The wake-up of a key that may have become free: the head of its line, or (nobody in line)
/// anyone who waits on the key. `except`: a ticket leaving the line in this transaction.
fn add_wakeup(tx: &Connection, ns: &str, key: &str, except: Option<i64>, now: i64) -> Result<()> {
    let line: Vec<Waiting> = waiting(tx, ns, key, now)?
        .into_iter()
        .map(|(w, _)| w)
        .collect();
    let tickets = rules::wake_range(&line, except, now);
    // A freed key of a pool wakes one claimer of the pool.
    let pool: Option<String> = tx
        .query_row(
            "SELECT pool FROM leases WHERE namespace = ?1 AND key = ?2",
            params![ns, key],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| db_error("wake-up", e))?
        .flatten();
    let pool = pool.map(|p| tag(ns, &p));
    let payload = wakeup_payload(Some(&tag(ns, key)), tickets, pool.as_deref());
    add_event(tx, WAKEUP_CHANNEL, &payload, now)
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
    // Without a ticket this acquire is last in line: every live waiter is ahead of it.
    let line: Vec<Waiting> = waiting(conn, ns, key, now)?
        .into_iter()
        .map(|(w, _)| w)
        .collect();
    Ok(
        match rules::grantable_in_turn(
            row.as_ref().map(KeyRow::view).as_ref(),
            false,
            &line,
            attempt,
            now,
        ) {
            Grantable::Done => Look::Refused(AcquireOutcome::Done),
            Grantable::Held(_) => Look::Refused(AcquireOutcome::Held),
            Grantable::Yes => Look::Grantable(row.map(|r| r.metadata)),
        },
    )
}

/// The next value of the fence sequence (grants and offers share it, as on PostgreSQL).
/// Grants one key exclusively inside a write transaction if it is free and nobody waits in
/// line; otherwise says why not (see [`look`]).
fn acquire_in(
    tx: &Connection,
    (ns, key, owner): (&str, &str, &str),
    attempt: i64,
    ttl: i64,
    metadata: Option<&str>,
    now: i64,
) -> Result<AcquireOutcome> {
    let base = match look(tx, ns, key, attempt, now)? {
        Look::Refused(outcome) => return Ok(outcome),
        Look::Grantable(base) => base.unwrap_or_else(|| "{}".to_string()),
    };
    let fence = next_fence(tx, "acquire")?;
    let (text, merged) = merge(&base, metadata)?;
    let expires = now + ttl;
    grant_exclusive(tx, (ns, key, owner), fence, attempt, expires, &text, now)?;
    Ok(AcquireOutcome::Granted(Granted {
        fence,
        expires_at: time(expires),
        metadata: merged,
    }))
}

fn next_fence(tx: &Connection, what: &str) -> Result<i64> {
    tx.query_row(
        "UPDATE fence_seq SET value = value + 1 WHERE id = 1 RETURNING value",
        [],
        |r| r.get(0),
    )
    .map_err(|e| db_error(what, e))
}

/// Writes an exclusive grant on the key's row (created if never seen).
fn grant_exclusive(
    tx: &Connection,
    (ns, key, owner): (&str, &str, &str),
    fence: i64,
    attempt: i64,
    expires: i64,
    metadata: &str,
    now: i64,
) -> Result<()> {
    tx.execute(
        "INSERT INTO leases (namespace, key, owner, fence, attempt, expires_at_ms, done,
                             metadata, updated_at_ms, granted_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?8)
         ON CONFLICT (namespace, key) DO UPDATE SET
           owner = excluded.owner, fence = excluded.fence, attempt = excluded.attempt,
           expires_at_ms = excluded.expires_at_ms, done = 0,
           metadata = excluded.metadata, updated_at_ms = excluded.updated_at_ms,
           granted_at_ms = excluded.granted_at_ms",
        params![ns, key, owner, fence, attempt, expires, metadata, now],
    )
    .map_err(|e| db_error("acquire", e))?;
    Ok(())
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
            "SELECT key, owner, fence, expires_at_ms, attempt, metadata, shared_until_ms
               FROM leases
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
            shared_until_ms: row.get(6).map_err(get)?,
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
        add_wakeup(tx, ns, key, None, now)?;
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
        let payload = wakeup_payload(Some(&tag(ns, key)), None, None);
        add_event(tx, WAKEUP_CHANNEL, &payload, now)?;
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
            let item = (ns.as_str(), key.as_str(), owner.as_str());
            Ok((
                acquire_in(tx, item, attempt, ttl, metadata.as_deref(), now)?,
                false,
            ))
        })
        .await
    }

    async fn acquire_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[AcquireItem],
    ) -> Result<Vec<AcquireOutcome>> {
        let (ns, owner, items) = (namespace.to_string(), owner.to_string(), items.to_vec());
        // One writer at a time: the round is one transaction, one commit for all its grants.
        self.write("acquire", move |tx, now| {
            let mut outcomes = Vec::with_capacity(items.len());
            for i in &items {
                let item = (ns.as_str(), i.key.as_str(), owner.as_str());
                let ttl = i.ttl.as_millis() as i64;
                outcomes.push(acquire_in(
                    tx,
                    item,
                    i.attempt,
                    ttl,
                    i.metadata.as_deref(),
                    now,
                )?);
            }
            Ok((outcomes, false))
        })
        .await
    }

    async fn acquire_queued(&self, r: &AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let (ns, key, owner) = (
            r.namespace.to_string(),
            r.key.to_string(),
            r.owner.to_string(),
        );
        let (ttl, attempt, shared, ticket, enqueue) = (
            r.ttl.as_millis() as i64,
            r.attempt,
            r.shared,
            r.ticket,
            r.enqueue,
        );
        let metadata = r.metadata.map(str::to_string);
        // The same steps as PostgreSQL's `acquire_queued`, under the store's write lock.
        self.write("acquire", move |tx, now| {
            delete_dead_tickets(tx, &ns, &key, now, "acquire")?;
            let row = read_key(tx, &ns, &key, "acquire")?;
            let line = waiting(tx, &ns, &key, now)?;
            // The caller's place: its ticket, or (none known) one its attempt took before.
            let by_attempt: Option<i64> = match ticket {
                Some(_) => None,
                None => tx
                    .query_row(
                        "SELECT min(ticket) FROM tickets
                          WHERE namespace = ?1 AND key = ?2 AND owner = ?3 AND attempt = ?4
                            AND granted = 0 AND expires_at_ms > ?5",
                        params![ns, key, owner, attempt, now],
                        |r| r.get(0),
                    )
                    .map_err(|e| db_error("acquire", e))?,
            };
            let mine = ticket
                .or(by_attempt)
                .filter(|t| line.iter().any(|(w, o)| w.ticket == *t && *o == owner));
            let ahead: Vec<Waiting> = line
                .iter()
                .map(|(w, _)| *w)
                .filter(|w| mine.is_none_or(|m| w.ticket < m))
                .collect();
            let expires = now + ttl;
            if shared {
                // A retry whose first try was granted (its answer lost) gets that grant.
                let again: Option<(i64, i64, String)> = tx
                    .query_row(
                        "SELECT fence, expires_at_ms, metadata FROM tickets
                          WHERE namespace = ?1 AND key = ?2 AND owner = ?3 AND attempt = ?4
                            AND granted = 1 AND expires_at_ms > ?5",
                        params![ns, key, owner, attempt, now],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()
                    .map_err(|e| db_error("acquire", e))?;
                if let Some((fence, expires_at, text)) = again {
                    return Ok((
                        AcquireOutcome::Granted(Granted {
                            fence,
                            expires_at: time(expires_at),
                            metadata: parse_metadata(&text)?,
                        }),
                        false,
                    ));
                }
            }
            let view = row.as_ref().map(KeyRow::view);
            let outcome = match rules::grantable_in_turn(view.as_ref(), shared, &ahead, attempt, now)
            {
                Grantable::Done => AcquireOutcome::Done,
                Grantable::Held(remaining) => {
                    let ticket = match mine {
                        Some(t) => {
                            tx.execute(
                                "UPDATE tickets SET expires_at_ms = ?4, updated_at_ms = ?5
                                  WHERE namespace = ?1 AND key = ?2 AND ticket = ?3",
                                params![ns, key, t, expires, now],
                            )
                            .map_err(|e| db_error("acquire", e))?;
                            Some(t)
                        }
                        None if enqueue => {
                            let t = next_fence(tx, "acquire")?;
                            tx.execute(
                                "INSERT INTO tickets (namespace, key, ticket, owner, shared, attempt,
                                                      granted, expires_at_ms, updated_at_ms)
                                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8)",
                                params![ns, key, t, owner, shared, attempt, expires, now],
                            )
                            .map_err(|e| db_error("acquire", e))?;
                            Some(t)
                        }
                        None => None,
                    };
                    AcquireOutcome::Queued {
                        ticket,
                        remaining: Some(remaining),
                    }
                }
                Grantable::Yes => {
                    if let Some(t) = mine {
                        tx.execute(
                            "DELETE FROM tickets WHERE namespace = ?1 AND key = ?2 AND ticket = ?3",
                            params![ns, key, t],
                        )
                        .map_err(|e| db_error("acquire", e))?;
                    }
                    let fence = next_fence(tx, "acquire")?;
                    if shared {
                        let (holders, until) = match &row {
                            Some(r) => rules::shared_granted(
                                r.shared_holders,
                                r.shared_until_ms,
                                expires,
                                now,
                            ),
                            None => rules::shared_granted(0, None, expires, now),
                        };
                        tx.execute(
                            "INSERT INTO leases (namespace, key, fence, done, metadata, updated_at_ms,
                                                 shared_holders, shared_until_ms)
                             VALUES (?1, ?2, ?3, 0, '{}', ?4, ?5, ?6)
                             ON CONFLICT (namespace, key) DO UPDATE SET
                               shared_holders = excluded.shared_holders,
                               shared_until_ms = excluded.shared_until_ms,
                               updated_at_ms = excluded.updated_at_ms",
                            params![ns, key, fence, now, holders, until],
                        )
                        .map_err(|e| db_error("acquire", e))?;
                        let (text, merged) = merge("{}", metadata.as_deref())?;
                        tx.execute(
                            "INSERT INTO tickets (namespace, key, ticket, owner, shared, attempt,
                                                  granted, fence, expires_at_ms, metadata,
                                                  updated_at_ms, granted_at_ms)
                             VALUES (?1, ?2, ?3, ?4, 1, ?5, 1, ?3, ?6, ?7, ?8, ?8)",
                            params![ns, key, fence, owner, attempt, expires, text, now],
                        )
                        .map_err(|e| db_error("acquire", e))?;
                        AcquireOutcome::Granted(Granted {
                            fence,
                            expires_at: time(expires),
                            metadata: merged,
                        })
                    } else {
                        let base = row.as_ref().map_or("{}", |r| r.metadata.as_str());
                        let (text, merged) = merge(base, metadata.as_deref())?;
                        grant_exclusive(tx, (&ns, &key, &owner), fence, attempt, expires, &text, now)?;
                        AcquireOutcome::Granted(Granted {
                            fence,
                            expires_at: time(expires),
                            metadata: merged,
                        })
                    }
                }
            };
            Ok((outcome, false))
        })
        .await
    }

    async fn leave_queue(
        &self,
        namespace: &str,
        key: &str,
        owner: &str,
        ticket: i64,
        pass_turn: bool,
    ) -> Result<()> {
        let (ns, key, owner) = (namespace.to_string(), key.to_string(), owner.to_string());
        self.write("leave queue", move |tx, now| {
            let line = waiting(tx, &ns, &key, now)?;
            let gone = tx
                .execute(
                    "DELETE FROM tickets WHERE namespace = ?1 AND key = ?2 AND ticket = ?3
                        AND owner = ?4 AND granted = 0",
                    params![ns, key, ticket, owner],
                )
                .map_err(|e| db_error("leave queue", e))?;
            let held = read_key(tx, &ns, &key, "leave queue")?
                .is_some_and(|r| r.expires_at_ms.is_some_and(|e| e > now));
            // As on PostgreSQL (`leave_queue`): the head wakes when the leaver was at the head,
            // or when a release named the leaver (passing the turn on), the key being free.
            let was_head = line.first().is_none_or(|(w, _)| w.ticket >= ticket);
            let wake = (gone > 0 || pass_turn) && !held && (pass_turn || was_head);
            if wake {
                add_wakeup(tx, &ns, &key, Some(ticket), now)?;
            }
            Ok(((), wake))
        })
        .await
    }

    async fn release_shared(&self, l: LeaseRef<'_>) -> Result<bool> {
        let (ns, key, owner, fence) = owned(l);
        self.write("release", move |tx, now| {
            let gone = tx
                .execute(
                    "DELETE FROM tickets WHERE namespace = ?1 AND key = ?2 AND owner = ?3
                        AND fence = ?4 AND granted = 1 AND expires_at_ms > ?5",
                    params![ns, key, owner, fence, now],
                )
                .map_err(|e| db_error("release", e))?;
            if gone == 0 {
                return Ok((false, false));
            }
            let Some(row) = read_key(tx, &ns, &key, "release")? else {
                return Ok((true, false));
            };
            let (holders, until) = rules::shared_released(row.shared_holders, row.shared_until_ms);
            tx.execute(
                "UPDATE leases SET shared_holders = ?3, shared_until_ms = ?4, updated_at_ms = ?5
                  WHERE namespace = ?1 AND key = ?2",
                params![ns, key, holders, until, now],
            )
            .map_err(|e| db_error("release", e))?;
            if holders == 0 {
                add_wakeup(tx, &ns, &key, None, now)?;
            }
            Ok((true, holders == 0))
        })
        .await
    }

    async fn holder(&self, namespace: &str, key: &str) -> Result<Option<Holder>> {
        let (ns, key) = (namespace.to_string(), key.to_string());
        self.run(move |conn| {
            let now = now_ms();
            let Some(row) = read_key(conn, &ns, &key, "holder")? else {
                return Ok(None);
            };
            if rules::key_state(&row.view(), now) != KeyState::Held {
                return Ok(None);
            }
            let expires = row.expires_at_ms.unwrap_or(now);
            Ok(Some(Holder {
                owner: row.owner.clone().unwrap_or_default(),
                fence: row.fence,
                expires_at: time(expires),
                metadata: parse_metadata(&row.metadata)?,
                granted_at: time(row.granted_at_ms.unwrap_or(expires)),
            }))
        })
        .await
    }

    async fn renew(
        &self,
        l: LeaseRef<'_>,
        ttl: Duration,
        metadata: Option<&str>,
    ) -> Result<Option<Renewed>> {
        let (ns, key, owner, fence) = owned(l);
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
        items: &[BatchItem<'_>],
    ) -> Result<Vec<(i64, DateTime<Utc>)>> {
        let (ns, owner) = (namespace.to_string(), owner.to_string());
        let batch = serde_json::to_string(
            &items
                .iter()
                .filter(|i| !i.shared)
                .map(|i| (i.key, i.fence, i.ttl.as_millis() as i64))
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default();
        let shared: Vec<(String, i64, i64)> = items
            .iter()
            .filter(|i| i.shared)
            .map(|i| (i.key.to_string(), i.fence, i.ttl.as_millis() as i64))
            .collect();
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
            let mut rows = rows;
            // Shared holders (rare): their tickets, and their key's latest expiry.
            for (key, fence, ttl) in &shared {
                let renewed = tx
                    .execute(
                        "UPDATE tickets SET expires_at_ms = ?5, updated_at_ms = ?6
                          WHERE namespace = ?1 AND key = ?2 AND owner = ?3 AND fence = ?4
                            AND granted = 1 AND expires_at_ms > ?6",
                        params![ns, key, owner, fence, now + ttl, now],
                    )
                    .map_err(|e| db_error("keepalive", e))?;
                if renewed > 0 {
                    tx.execute(
                        "UPDATE leases SET shared_until_ms = max(coalesce(shared_until_ms, 0), ?3)
                          WHERE namespace = ?1 AND key = ?2",
                        params![ns, key, now + ttl],
                    )
                    .map_err(|e| db_error("keepalive", e))?;
                    rows.push((*fence, time(now + ttl)));
                }
            }
            Ok((rows, false))
        })
        .await
    }

    async fn release(&self, l: LeaseRef<'_>) -> Result<bool> {
        let (ns, key, owner, fence) = owned(l);
        self.write("release", move |tx, now| {
            release_one(tx, &ns, &owner, &key, fence, now)
        })
        .await
    }

    async fn done(&self, l: LeaseRef<'_>, metadata: Option<&str>) -> Result<Option<Metadata>> {
        let (ns, key, owner, fence) = owned(l);
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
            delete_dead_tickets(tx, &ns, &key, now, "reset")?;
            Ok((outcome, false))
        })
        .await
    }

    async fn sweep(&self, namespace: &str, prefix: &str) -> Result<(u64, u64)> {
        let (ns, prefix) = (namespace.to_string(), prefix.to_string());
        let below = crate::options::prefix_end(&prefix);
        self.write("sweep", move |tx, now| {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT key, owner, fence, expires_at_ms, done, attempt, shared_until_ms,
                            pool IS NOT NULL
                       FROM leases
                      WHERE namespace = ?1 AND key >= ?2 AND (?3 IS NULL OR key < ?3)",
                )
                .map_err(|e| db_error("sweep", e))?;
            let mut rows = stmt
                .query(params![ns, prefix, below])
                .map_err(|e| db_error("sweep", e))?;
            let mut gone: Vec<String> = Vec::new();
            while let Some(row) = rows.next().map_err(|e| db_error("sweep", e))? {
                let get = |e| db_error("sweep", e);
                let owner: Option<String> = row.get(1).map_err(get)?;
                let stored = StoredKey {
                    owner: owner.as_deref(),
                    fence: row.get(2).map_err(get)?,
                    expires_at_ms: row.get(3).map_err(get)?,
                    done: row.get(4).map_err(get)?,
                    attempt: row.get(5).map_err(get)?,
                    shared_until_ms: row.get(6).map_err(get)?,
                };
                if rules::member_row_is_sweepable(&stored, row.get(7).map_err(get)?, now) {
                    gone.push(row.get(0).map_err(get)?);
                    if gone.len() == SWEEP_LIMIT {
                        break;
                    }
                }
            }
            drop(rows);
            for key in &gone {
                tx.execute(
                    "DELETE FROM leases WHERE namespace = ?1 AND key = ?2",
                    params![ns, key],
                )
                .map_err(|e| db_error("sweep", e))?;
            }
            // Dead tickets (`rules::waits_in_line`), up to SWEEP_LIMIT of the namespace.
            let tickets = tx
                .execute(
                    "DELETE FROM tickets WHERE rowid IN (
                       SELECT rowid FROM tickets
                        WHERE namespace = ?1 AND expires_at_ms <= ?2 LIMIT ?3)",
                    params![ns, now, SWEEP_LIMIT as i64],
                )
                .map_err(|e| db_error("sweep", e))?;
            Ok(((gone.len() as u64, tickets as u64), false))
        })
        .await
    }

    async fn list(&self, namespace: &str, q: &ListQuery) -> Result<ListPage> {
        let ns = namespace.to_string();
        let q = q.clone();
        let range = q.range()?;
        self.run(move |conn| list_in(conn, &ns, &q, &range, now_ms()))
            .await
    }

    async fn snapshot(
        &self,
        namespace: &str,
        page: &ListQuery,
        recipes: &ListQuery,
        streams: usize,
        waiter_keys: usize,
    ) -> Result<SnapshotRows> {
        let ns = namespace.to_string();
        let (page, recipes) = (page.clone(), recipes.clone());
        let (page_range, recipe_range) = (page.range()?, recipes.range()?);
        // Every read in one transaction: one consistent view, one call on the store's thread.
        self.run(move |conn| {
            let tx = conn.transaction().map_err(|e| db_error("snapshot", e))?;
            let now = now_ms();
            let keys = list_in(&tx, &ns, &page, &page_range, now)?;
            let mut counts = count_in(&tx, &ns, &page_range, now)?;
            let recipe_rows = list_in(&tx, &ns, &recipes, &recipe_range, now)?;
            let (streams, streams_truncated) = streams_in(&tx, &ns, streams)?;
            let (waiters, waiters_truncated, waiting) =
                waiters_in(&tx, &ns, &page_range, waiter_keys, now)?;
            counts.waiting = waiting;
            tx.commit().map_err(|e| db_error("snapshot", e))?;
            Ok(SnapshotRows {
                page: keys,
                counts,
                recipes: recipe_rows,
                streams,
                streams_truncated,
                waiters,
                waiters_truncated,
            })
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

    async fn notify_batch(&self, notifications: &[(&str, &str)]) -> Result<()> {
        let notifications: Vec<(String, String)> = notifications
            .iter()
            .map(|(c, p)| (c.to_string(), p.to_string()))
            .collect();
        self.write("notify", move |tx, now| {
            for (channel, payload) in &notifications {
                add_event(tx, channel, payload, now)?;
            }
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
                let payload = wakeup_payload(Some(&tag(&ns, &pool)), None, None);
                add_event(tx, WAKEUP_CHANNEL, &payload, now)?;
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
                                       metadata = ?7, updated_at_ms = ?8, granted_at_ms = ?8
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
        self.run(move |conn| {
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
                    shared_until_ms: None,
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

    fn fenced_schema(&self) -> std::result::Result<&str, &'static str> {
        Err(
            "the embedded store keeps its leases in its own SQLite file, which no transaction \
             of the application's database can read or lock: fenced writes need accord on the \
             application's PostgreSQL",
        )
    }

    fn wake_secret(&self) -> Option<String> {
        Some(WAKE_SECRET.to_string())
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
            if let Some(wakeup) = parse_wakeup(&payload) {
                sink.deliver(wakeup);
            }
        } else if channels.contains_key(&channel) {
            sink.deliver(BackendEvent::Notification { channel, payload });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `waiters_in` on a real (in-memory) store: live waiting tickets only, grouped per key in
    /// key order, bounded in keys while every waiter in the range is counted.
    #[test]
    fn waiters_are_grouped_per_key_and_bounded() {
        let mut conn = Connection::open_in_memory().unwrap();
        store::migrate(&mut conn, "test").unwrap();
        let now = 1_000_000;
        let ticket = |key: &str, n: i64, shared: bool, granted: bool, expires: i64| {
            conn.execute(
                "INSERT INTO tickets (namespace, key, ticket, owner, shared, attempt, granted,
                                      expires_at_ms, updated_at_ms)
                 VALUES ('ns', ?1, ?2, 'o', ?3, 0, ?4, ?5, 0)",
                params![key, n, shared, granted, expires],
            )
            .unwrap();
        };
        ticket("q/b", 1, false, false, now + 1);
        ticket("q/b", 2, true, false, now + 1);
        ticket("q/b", 3, true, false, now + 1);
        // A shared holder (granted) and a waiter whose place expired: not waiters.
        ticket("q/a", 4, true, true, now + 1);
        ticket("q/a", 5, false, false, now);
        ticket("q/c", 6, false, false, now + 1);
        ticket("z/a", 7, false, false, now + 1);
        let range = ListQuery::new().prefix("q/").range().unwrap();

        let (all, truncated, waiting) = waiters_in(&conn, "ns", &range, 10, now).unwrap();
        let got: Vec<(&str, u64, u64)> = all
            .iter()
            .map(|w| (w.key.as_str(), w.exclusive, w.shared))
            .collect();
        assert_eq!(got, [("q/b", 1, 2), ("q/c", 1, 0)]);
        assert_eq!((truncated, waiting), (false, 4));

        let (first, truncated, waiting) = waiters_in(&conn, "ns", &range, 1, now).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].key, "q/b");
        assert_eq!((truncated, waiting), (true, 4));
    }

    /// A page of held keys reads only the keys that name an owner (leases_owned, version 8),
    /// a page of free keys the keys not done: the plans SQLite picks for `list`'s statement.
    #[test]
    fn held_pages_search_the_owned_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        store::migrate(&mut conn, "test").unwrap();
        let plan = |state: KeyState| {
            let range = ListQuery::new().prefix("k/").state(state).range().unwrap();
            let sql = format!("EXPLAIN QUERY PLAN {}", keys_sql(&range));
            let mut stmt = conn.prepare(&sql).unwrap();
            let details: Vec<String> = stmt
                .query_map(params!["ns", "k/", "k0"], |r| r.get(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            details.join("; ")
        };
        let held = plan(KeyState::Held);
        assert!(held.contains("USING INDEX leases_owned"), "{held}");
        let free = plan(KeyState::Free);
        assert!(free.contains("USING INDEX leases_undone"), "{free}");
    }

    /// An exclusive acquire retried with its first try's attempt after that grant expired
    /// (its answer lost) while a shared holder took the key: the retry is refused, and the
    /// row still shows the shared holder alone.
    #[test]
    fn a_retried_exclusive_acquire_is_not_granted_beside_shared_holders() {
        let mut conn = Connection::open_in_memory().unwrap();
        store::migrate(&mut conn, "test").unwrap();
        let item = ("ns", "k", "writer");
        let first = acquire_in(&conn, item, 42, 100, None, 1_000).unwrap();
        let AcquireOutcome::Granted(granted) = first else {
            panic!("the first try was not granted");
        };
        // Past the grant's expiry, a shared holder takes the key, as `acquire_queued` writes it.
        conn.execute(
            "UPDATE leases SET shared_holders = 1, shared_until_ms = 5000
              WHERE namespace = 'ns' AND key = 'k'",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO tickets (namespace, key, ticket, owner, shared, attempt, granted, fence,
                                  expires_at_ms, updated_at_ms, granted_at_ms)
             VALUES ('ns', 'k', 99, 'reader', 1, 7, 1, 99, 5000, 1200, 1200)",
            [],
        )
        .unwrap();

        let retry = acquire_in(&conn, item, 42, 100, None, 1_200).unwrap();
        assert!(
            matches!(retry, AcquireOutcome::Held),
            "the retry was granted beside a live shared holder"
        );
        let row = read_key(&conn, "ns", "k", "test").unwrap().unwrap();
        assert_eq!(row.fence, granted.fence, "the retry took a new fence");
        assert_eq!(row.expires_at_ms, Some(1_100));
    }
}
