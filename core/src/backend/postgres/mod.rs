//! The PostgreSQL backend: a pool of pipelined command connections with prepared statements,
//! one listening connection, and versioned migrations.

mod connect;
pub(crate) mod fenced;
mod listener;
mod pool;
mod secret;
pub(crate) mod sql;
mod streams;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tracing::Instrument;

use self::connect::ConnectSpec;
/// URL components are percent-decoded, and TLS failures worded, alike on every store that
/// takes a URL (the etcd store uses them).
#[cfg(feature = "etcd")]
pub(crate) use self::connect::{causes, explain_tls, percent_decode};
use self::listener::Listener;
use self::pool::{Failure, Pool};
use self::sql::Sql;
use super::{
    millis, AcquireItem, AcquireOutcome, AcquireRequest, Backend, BatchItem, ClaimRequest, Claimed,
    DoneItem, EventSink, Granted, Holder, KeyWaiters, LeaseRef, RenewAnswer, Renewed, ResetOutcome,
    SnapshotRows, StreamRow,
};
use crate::error::{Error, ErrorKind, Result};
use crate::metadata::Metadata;
use crate::options::ClientOptions;
use crate::options::{
    KeyCounts, KeyState, LeaseInfo, ListPage, ListQuery, PoolCounts, StateFilter,
};
use crate::rules::{self, SchemaFit};
use crate::stats::Recorder;

/// A batch's columns, as the batched statements take them (`unnest` of three arrays).
struct Columns<'a> {
    keys: Vec<&'a str>,
    fences: Vec<i64>,
    ttls: Vec<i64>,
}

impl Columns<'_> {
    fn with_capacity(n: usize) -> Self {
        Columns {
            keys: Vec::with_capacity(n),
            fences: Vec::with_capacity(n),
            ttls: Vec::with_capacity(n),
        }
    }
}

pub(crate) struct PgBackend {
    pool: Arc<Pool>,
    listener: Arc<Listener>,
    wakeup_channel: String,
    /// See `secret.rs`.
    wake_secret: Option<String>,
    /// The schema: where the application's transaction finds accord's functions (`fenced.rs`).
    schema: String,
}

impl PgBackend {
    pub async fn connect(
        url: &str,
        options: &ClientOptions,
        sink: Arc<dyn EventSink>,
        stats: Arc<Recorder>,
    ) -> Result<PgBackend> {
        let spec = ConnectSpec::parse(url, &options.application_name, options.connect_timeout)?;
        // LISTEN may go elsewhere than the commands (a transaction-pooling PgBouncer cannot
        // carry it): `listen_url`, checked here so that a bad one fails at connect.
        let listen_spec = match &options.listen_url {
            Some(listen_url) => ConnectSpec::parse(
                listen_url,
                &options.application_name,
                options.connect_timeout,
            )
            .map_err(|e| Error::invalid("listen_url", e.message()))?,
            None => spec.clone(),
        };
        let span = tracing::info_span!(target: "accord", "connect", server = %spec.display, schema = %options.schema);
        let (pool, listener, wakeup_channel, wake_secret) = async {
            let mut first = spec.connect(|_| {}).await?;
            migrate(
                &mut first.client,
                &options.schema,
                options.migrate,
                &spec.display,
            )
            .await?;
            let wake_secret = secret::fetch(&first.client, &options.schema).await;
            let sql = Arc::new(Sql::new(&options.schema));
            let pool = Arc::new(Pool::new(
                spec.clone(),
                sql,
                options.pool_size,
                options.statement_timeout,
                options.slow_statement,
                options.prepare_statements,
                stats,
            ));
            pool.adopt(first).await?;
            pool.warm_up().await?;
            let wakeup_channel = sql::wakeup_channel(&options.schema);
            let probe_pool = Arc::downgrade(&pool);
            let probe: listener::ProbeSender = Arc::new(move |channel, payload| {
                let pool = probe_pool.clone();
                Box::pin(async move {
                    let pool = pool.upgrade().ok_or_else(Error::closed)?;
                    let params: [&(dyn ToSql + Sync); 2] = [&channel, &payload];
                    pool.run_retrying("notify", |c| async move {
                        c.execute(&c.stmts.notify, &params).await
                    })
                    .await
                    .map(|_| ())
                })
            });
            let listener = Listener::new(
                listen_spec,
                sink,
                wakeup_channel.clone(),
                options.connect_timeout.max(options.statement_timeout),
                probe,
            );
            tracing::info!(target: "accord", pool = options.pool_size, "connected");
            Ok::<_, Error>((pool, listener, wakeup_channel, wake_secret))
        }
        .instrument(span)
        .await?;
        Ok(PgBackend {
            pool,
            listener,
            wakeup_channel,
            wake_secret,
            schema: options.schema.clone(),
        })
    }
}

/// The answer of an acquire statement when it granted (columns 0-3) or found the key done
/// (column 4); `None` otherwise.
fn granted_or_done(row: &tokio_postgres::Row) -> Result<Option<AcquireOutcome>> {
    if row.get::<_, bool>(0) {
        return Ok(Some(AcquireOutcome::Granted(Granted {
            fence: row.get(1),
            expires_at: row.get(2),
            metadata: parse_metadata(row.get(3))?,
        })));
    }
    Ok(row.get::<_, bool>(4).then_some(AcquireOutcome::Done))
}

fn parse_metadata(text: &str) -> Result<Metadata> {
    serde_json::from_str(text)
        .map_err(|e| Error::internal(format!("stored metadata is not a JSON object: {e}")))
}

#[async_trait]
impl Backend for PgBackend {
    async fn acquire(&self, r: &AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let ttl = millis(r.ttl);
        let params: [&(dyn ToSql + Sync); 6] = [
            &r.namespace,
            &r.key,
            &r.owner,
            &r.attempt,
            &ttl,
            &r.metadata,
        ];
        // Safe to repeat: the attempt token makes a second try re-grant our own first grant.
        let rows = self
            .pool
            .run_retrying("acquire", |c| async move {
                c.query(&c.stmts.acquire, &params).await
            })
            .await?;
        let Some(row) = rows.first() else {
            return Ok(AcquireOutcome::Held);
        };
        if let Some(outcome) = granted_or_done(row)? {
            return Ok(outcome);
        }
        Ok(AcquireOutcome::Held)
    }

    async fn acquire_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[AcquireItem],
    ) -> Result<Vec<AcquireOutcome>> {
        let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
        let attempts: Vec<i64> = items.iter().map(|i| i.attempt).collect();
        let ttls: Vec<i64> = items.iter().map(|i| millis(i.ttl)).collect();
        let metadata: Vec<Option<&str>> = items.iter().map(|i| i.metadata.as_deref()).collect();
        let params: [&(dyn ToSql + Sync); 6] =
            [&namespace, &owner, &keys, &attempts, &ttls, &metadata];
        // Safe to repeat, as `acquire`: the attempt tokens re-grant our own first grants.
        let rows = self
            .pool
            .run_retrying("acquire", |c| async move {
                c.query(&c.stmts.acquire_batch, &params).await
            })
            .await?;
        let mut outcomes: HashMap<String, AcquireOutcome> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let outcome = match row.get::<_, Option<i64>>(1) {
                Some(fence) => AcquireOutcome::Granted(Granted {
                    fence,
                    expires_at: row.get(2),
                    metadata: parse_metadata(row.get(3))?,
                }),
                None if row.get::<_, bool>(4) => AcquireOutcome::Done,
                None => AcquireOutcome::Held,
            };
            outcomes.insert(row.get(0), outcome);
        }
        Ok(items
            .iter()
            .map(|i| outcomes.remove(&i.key).unwrap_or(AcquireOutcome::Held))
            .collect())
    }

    async fn acquire_queued(&self, r: &AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let ttl = millis(r.ttl);
        let params: [&(dyn ToSql + Sync); 9] = [
            &r.namespace,
            &r.key,
            &r.owner,
            &r.attempt,
            &ttl,
            &r.metadata,
            &r.shared,
            &r.ticket,
            &r.enqueue,
        ];
        // Safe to repeat: the attempt token re-grants a lost first grant, and finds the place
        // in line a lost first try took (the statement's `mine`).
        let rows = self
            .pool
            .run_retrying("acquire", |c| async move {
                c.query(&c.stmts.acquire_queued, &params).await
            })
            .await?;
        let Some(row) = rows.first() else {
            return Ok(AcquireOutcome::Queued {
                ticket: None,
                remaining: None,
            });
        };
        if let Some(outcome) = granted_or_done(row)? {
            return Ok(outcome);
        }
        Ok(AcquireOutcome::Queued {
            ticket: row.get(6),
            remaining: row
                .get::<_, Option<i64>>(5)
                .map(|ms| Duration::from_millis(ms.max(0) as u64)),
        })
    }

    async fn leave_queue(
        &self,
        namespace: &str,
        key: &str,
        owner: &str,
        ticket: i64,
        pass_turn: bool,
    ) -> Result<()> {
        let channel = self.wakeup_channel.as_str();
        let params: [&(dyn ToSql + Sync); 6] =
            [&namespace, &key, &owner, &ticket, &channel, &pass_turn];
        self.pool
            .run_retrying("leave queue", |c| async move {
                c.query_one(&c.stmts.leave_queue, &params).await
            })
            .await?;
        Ok(())
    }

    async fn release_shared(&self, l: LeaseRef<'_>) -> Result<bool> {
        let channel = self.wakeup_channel.as_str();
        let params: [&(dyn ToSql + Sync); 5] = [&l.namespace, &l.key, &l.owner, &l.fence, &channel];
        let row = self
            .pool
            .run_retrying("release", |c| async move {
                c.query_one(&c.stmts.release_shared, &params).await
            })
            .await?;
        Ok(row.get::<_, i64>(0) > 0)
    }

    async fn holder(&self, namespace: &str, key: &str) -> Result<Option<Holder>> {
        let params: [&(dyn ToSql + Sync); 2] = [&namespace, &key];
        let row = self
            .pool
            .run_retrying("holder", |c| async move {
                c.query_opt(&c.stmts.holder, &params).await
            })
            .await?;
        row.map(|r| {
            Ok(Holder {
                owner: r.get::<_, Option<String>>(0).unwrap_or_default(),
                fence: r.get(1),
                expires_at: r.get(2),
                metadata: parse_metadata(r.get(3))?,
                granted_at: r.get::<_, Option<DateTime<Utc>>>(4).unwrap_or(r.get(2)),
            })
        })
        .transpose()
    }

    async fn renew(
        &self,
        l: LeaseRef<'_>,
        ttl: Duration,
        metadata: Option<&str>,
    ) -> Result<Option<Renewed>> {
        let ttl = millis(ttl);
        let params: [&(dyn ToSql + Sync); 6] =
            [&l.namespace, &l.key, &l.owner, &l.fence, &ttl, &metadata];
        let row = self
            .pool
            .run_retrying("renew", |c| async move {
                c.query_opt(&c.stmts.renew, &params).await
            })
            .await?;
        row.map(|row| {
            Ok(Renewed {
                expires_at: row.get(0),
                metadata: parse_metadata(row.get(1))?,
            })
        })
        .transpose()
    }

    async fn renew_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[BatchItem<'_>],
    ) -> Result<Vec<(i64, DateTime<Utc>)>> {
        Ok(self
            .renew_batch_settling(namespace, owner, items)
            .await?
            .renewed)
    }

    async fn renew_batch_settling(
        &self,
        namespace: &str,
        owner: &str,
        items: &[BatchItem<'_>],
    ) -> Result<RenewAnswer> {
        // The three arrays of each kind, in one pass (sized up front: a tick may carry
        // 10,000 leases, and growing six vectors by doubling showed in its profile).
        let shared = items.iter().filter(|i| i.shared).count();
        let mut exclusive_cols = Columns::with_capacity(items.len() - shared);
        let mut shared_cols = Columns::with_capacity(shared);
        for i in items {
            let cols = if i.shared {
                &mut shared_cols
            } else {
                &mut exclusive_cols
            };
            cols.keys.push(i.key);
            cols.fences.push(i.fence);
            cols.ttls.push(millis(i.ttl));
        }
        let (e, sh) = (&exclusive_cols, &shared_cols);
        let params: [&(dyn ToSql + Sync); 8] = [
            &namespace, &owner, &e.keys, &e.fences, &e.ttls, &sh.keys, &sh.fences, &sh.ttls,
        ];
        // Not retried here: the keepalive schedules its own retry against the leases' deadlines.
        // One row of arrays (see `Sql::renew_batch`).
        let row = self
            .pool
            .run("keepalive", |c| async move {
                c.query_one(&c.stmts.renew_batch, &params).await
            })
            .await
            .map_err(Failure::into_error)?;
        let fences: Vec<i64> = row.try_get(0).map_err(Error::internal)?;
        let expiries: Vec<DateTime<Utc>> = row.try_get(1).map_err(Error::internal)?;
        Ok(RenewAnswer {
            renewed: fences.into_iter().zip(expiries).collect(),
            skipped: row.try_get(2).map_err(Error::internal)?,
            done: row.try_get(3).map_err(Error::internal)?,
            released: row.try_get(4).map_err(Error::internal)?,
        })
    }

    fn fenced_schema(&self) -> std::result::Result<&str, &'static str> {
        Ok(&self.schema)
    }

    async fn release(&self, l: LeaseRef<'_>) -> Result<bool> {
        let channel = self.wakeup_channel.as_str();
        let params: [&(dyn ToSql + Sync); 5] = [&l.namespace, &l.key, &l.owner, &l.fence, &channel];
        let row = self
            .pool
            .run_retrying("release", |c| async move {
                c.query_one(&c.stmts.release, &params).await
            })
            .await?;
        Ok(row.get::<_, i64>(0) > 0)
    }

    async fn done(&self, l: LeaseRef<'_>, metadata: Option<&str>) -> Result<Option<Metadata>> {
        let channel = self.wakeup_channel.as_str();
        let params: [&(dyn ToSql + Sync); 6] = [
            &l.namespace,
            &l.key,
            &l.owner,
            &l.fence,
            &metadata,
            &channel,
        ];
        let row = self
            .pool
            .run_retrying("done", |c| async move {
                c.query_opt(&c.stmts.done, &params).await
            })
            .await?;
        row.map(|r| parse_metadata(r.get(0))).transpose()
    }

    async fn release_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[(String, i64)],
    ) -> Result<Vec<i64>> {
        let channel = self.wakeup_channel.as_str();
        let keys: Vec<&str> = items.iter().map(|(key, _)| key.as_str()).collect();
        let fences: Vec<i64> = items.iter().map(|(_, fence)| *fence).collect();
        let params: [&(dyn ToSql + Sync); 5] = [&namespace, &owner, &keys, &fences, &channel];
        let rows = self
            .pool
            .run_retrying("release", |c| async move {
                c.query(&c.stmts.release_batch, &params).await
            })
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn done_batch(
        &self,
        namespace: &str,
        owner: &str,
        items: &[DoneItem],
    ) -> Result<Vec<(i64, Metadata)>> {
        let channel = self.wakeup_channel.as_str();
        let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
        let fences: Vec<i64> = items.iter().map(|i| i.fence).collect();
        let metadata: Vec<Option<&str>> = items.iter().map(|i| i.metadata.as_deref()).collect();
        let params: [&(dyn ToSql + Sync); 6] =
            [&namespace, &owner, &keys, &fences, &metadata, &channel];
        let rows = self
            .pool
            .run_retrying("done", |c| async move {
                c.query(&c.stmts.done_batch, &params).await
            })
            .await?;
        rows.iter()
            .map(|r| Ok((r.get(0), parse_metadata(r.get(1))?)))
            .collect()
    }

    async fn reset(&self, namespace: &str, key: &str) -> Result<ResetOutcome> {
        let params: [&(dyn ToSql + Sync); 2] = [&namespace, &key];
        let row = self
            .pool
            .run_retrying("reset", |c| async move {
                c.query_one(&c.stmts.reset, &params).await
            })
            .await?;
        Ok(match (row.get::<_, bool>(0), row.get::<_, bool>(1)) {
            (true, _) => ResetOutcome::Reset,
            (false, true) => ResetOutcome::Held,
            (false, false) => ResetOutcome::NotFound,
        })
    }

    async fn sweep(&self, namespace: &str, prefix: &str) -> Result<(u64, u64)> {
        let below = crate::options::prefix_end(prefix);
        let params: [&(dyn ToSql + Sync); 3] = [&namespace, &prefix, &below];
        let (sql, params) = (self.pool.sql(), &params);
        // Rare (once per join): sent by its text, not prepared on every connection.
        let rows = self
            .pool
            .run_retrying("sweep", |c| async move {
                let typed = pool::typed(params, sql::param_types::SWEEP);
                c.client.query_typed(&sql.sweep, &typed).await
            })
            .await?;
        let count = |i: usize| {
            rows.first()
                .map_or(0, |r| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0))
        };
        Ok((count(0), count(1)))
    }

    async fn list(&self, namespace: &str, q: &ListQuery) -> Result<ListPage> {
        let state = match q.state {
            StateFilter::All => None,
            StateFilter::Only(s) => Some(s.as_str()),
        };
        let metadata = q
            .metadata
            .as_ref()
            .map(|m| crate::validate::metadata("metadata filter", m))
            .transpose()?;
        let range = q.range()?;
        let (after_key, after_fence) = match &range.after {
            Some((key, fence)) => (Some(key.as_str()), Some(*fence)),
            None => (None, None),
        };
        // One more than asked tells whether another page follows.
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX) + 1;
        let params: [&(dyn ToSql + Sync); 10] = [
            &namespace,
            &range.from,
            &state,
            &metadata,
            &range.below,
            &after_key,
            &after_fence,
            &limit,
            &range.undone_only,
            &range.owned_only,
        ];
        let (sql, params) = (self.pool.sql(), &params);
        // Both on one connection, pipelined: one round trip. Always sent by their text
        // (`query_typed`), so that the planner sees the bounds (see `Sql::list_keys`).
        let (keys, holders) = self
            .pool
            .run_retrying("list", |c| async move {
                let keys = pool::typed(params, sql::param_types::LIST_KEYS);
                let holders = pool::typed(params, sql::param_types::LIST_HOLDERS);
                tokio::try_join!(
                    c.client.query_typed(&sql.list_keys, &keys),
                    c.client.query_typed(&sql.list_holders, &holders)
                )
            })
            .await?;
        Ok(ListPage::merged(
            lease_infos(keys)?,
            lease_infos(holders)?,
            q.limit,
        ))
    }

    async fn snapshot(
        &self,
        namespace: &str,
        page: &ListQuery,
        recipes: &ListQuery,
        streams: usize,
        waiter_keys: usize,
    ) -> Result<SnapshotRows> {
        let list_params = |q: &ListQuery| -> Result<ListParams> {
            let range = q.range()?;
            Ok(ListParams {
                state: match q.state {
                    StateFilter::All => None,
                    StateFilter::Only(s) => Some(s.as_str()),
                },
                metadata: q
                    .metadata
                    .as_ref()
                    .map(|m| crate::validate::metadata("metadata filter", m))
                    .transpose()?,
                after: range.after.clone(),
                from: range.from,
                below: range.below,
                // One more than asked tells whether another page follows.
                limit: i64::try_from(q.limit).unwrap_or(i64::MAX) + 1,
                undone_only: range.undone_only,
                owned_only: range.owned_only,
            })
        };
        let (p, r) = (list_params(page)?, list_params(recipes)?);
        let streams_limit = i64::try_from(streams).unwrap_or(i64::MAX - 1) + 1;
        let waiters_limit = i64::try_from(waiter_keys).unwrap_or(i64::MAX - 1) + 1;
        let sql = self.pool.sql();
        let (p, r, streams_limit, waiters_limit) = (&p, &r, &streams_limit, &waiters_limit);
        // Six reads on one connection, pipelined: one round trip. Sent by their text, as
        // `list` is (see `Sql::list_keys`).
        let (keys, holders, counts, recipe_rows, stream_rows, waiter_rows) = self
            .pool
            .run_retrying("snapshot", |c| async move {
                let (pa, ra) = (p.after(), r.after());
                let page_params: [&(dyn ToSql + Sync); 10] = [
                    &namespace,
                    &p.from,
                    &p.state,
                    &p.metadata,
                    &p.below,
                    &pa.0,
                    &pa.1,
                    &p.limit,
                    &p.undone_only,
                    &p.owned_only,
                ];
                let recipe_params: [&(dyn ToSql + Sync); 10] = [
                    &namespace,
                    &r.from,
                    &r.state,
                    &r.metadata,
                    &r.below,
                    &ra.0,
                    &ra.1,
                    &r.limit,
                    &r.undone_only,
                    &r.owned_only,
                ];
                let count_params: [&(dyn ToSql + Sync); 3] = [&namespace, &p.from, &p.below];
                let stream_params: [&(dyn ToSql + Sync); 2] = [&namespace, streams_limit];
                let waiter_params: [&(dyn ToSql + Sync); 4] =
                    [&namespace, &p.from, &p.below, waiters_limit];
                let keys = pool::typed(&page_params, sql::param_types::LIST_KEYS);
                let holders = pool::typed(&page_params, sql::param_types::LIST_HOLDERS);
                let count = pool::typed(&count_params, sql::param_types::COUNT_KEYS);
                let recipes = pool::typed(&recipe_params, sql::param_types::LIST_KEYS);
                let streams = pool::typed(&stream_params, sql::param_types::LIST_STREAMS);
                let waiters = pool::typed(&waiter_params, sql::param_types::LIST_WAITERS);
                tokio::try_join!(
                    c.client.query_typed(&sql.list_keys, &keys),
                    c.client.query_typed(&sql.list_holders, &holders),
                    c.client.query_typed(&sql.count_keys, &count),
                    c.client.query_typed(&sql.list_keys, &recipes),
                    c.client.query_typed(&sql.list_streams, &streams),
                    c.client.query_typed(&sql.list_waiters, &waiters),
                )
            })
            .await?;
        let counts = counts
            .first()
            .ok_or_else(|| Error::internal("no counts row"))?;
        let n = |i: usize| u64::try_from(counts.get::<_, i64>(i)).unwrap_or(0);
        let mut streams_out: Vec<StreamRow> = stream_rows
            .iter()
            .map(|row| StreamRow {
                stream: row.get(0),
                last_seq: row.get(1),
                first_seq: row.get(2),
                consumer: row
                    .get::<_, Option<String>>(3)
                    .map(|name| (name, row.get::<_, Option<i64>>(4).unwrap_or(0))),
            })
            .collect();
        let streams_truncated = streams_out.len() > streams;
        streams_out.truncate(streams);
        let count = |row: &tokio_postgres::Row, i: usize| -> Result<u64> {
            let n: i64 = row.try_get(i).map_err(Error::internal)?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        let waiting = match waiter_rows.first() {
            Some(row) => count(row, 3)?,
            None => 0,
        };
        let mut waiters = waiter_rows
            .iter()
            .map(|row| {
                Ok(KeyWaiters {
                    key: row.try_get(0).map_err(Error::internal)?,
                    exclusive: count(row, 1)?,
                    shared: count(row, 2)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let waiters_truncated = waiters.len() > waiter_keys;
        waiters.truncate(waiter_keys);
        Ok(SnapshotRows {
            page: ListPage::merged(lease_infos(keys)?, lease_infos(holders)?, page.limit),
            counts: KeyCounts {
                free: n(0),
                held: n(1),
                done: n(2),
                shared_holders: n(3),
                waiting,
            },
            recipes: ListPage::merged(lease_infos(recipe_rows)?, Vec::new(), recipes.limit),
            streams: streams_out,
            streams_truncated,
            waiters,
            waiters_truncated,
        })
    }

    async fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        let params: [&(dyn ToSql + Sync); 2] = [&channel, &payload];
        // Not retried: a notification that may have been sent once must not be sent twice.
        self.pool
            .run("notify", |c| async move {
                c.execute(&c.stmts.notify, &params).await
            })
            .await
            .map_err(Failure::into_error)?;
        Ok(())
    }

    async fn notify_batch(&self, notifications: &[(&str, &str)]) -> Result<()> {
        let (channels, payloads): (Vec<&str>, Vec<&str>) = notifications.iter().copied().unzip();
        let params: [&(dyn ToSql + Sync); 2] = [&channels, &payloads];
        // Not retried, as one notification is not.
        self.pool
            .run("notify", |c| async move {
                c.execute(&c.stmts.notify_batch, &params).await
            })
            .await
            .map_err(Failure::into_error)?;
        Ok(())
    }

    async fn offer(
        &self,
        namespace: &str,
        pool: &str,
        keys: &[String],
        metadata: Option<&str>,
    ) -> Result<u64> {
        let channel = self.wakeup_channel.as_str();
        let params: [&(dyn ToSql + Sync); 5] = [&namespace, &pool, &keys, &metadata, &channel];
        // Safe to repeat: a key that joined on the first try is left as it is.
        let row = self
            .pool
            .run_retrying("offer", |c| async move {
                c.query_one(&c.stmts.offer, &params).await
            })
            .await?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    async fn claim(&self, r: &ClaimRequest<'_>) -> Result<Claimed> {
        let ttl = millis(r.ttl);
        let limit = i64::try_from(r.limit).unwrap_or(i64::MAX);
        let pool_end = crate::options::pool_end(r.pool);
        let params: [&(dyn ToSql + Sync); 9] = [
            &r.namespace,
            &r.pool,
            &limit,
            &r.attempt,
            &r.owner,
            &ttl,
            &r.metadata,
            &r.below,
            &pool_end,
        ];
        // Safe to repeat: the attempt token makes a second try re-grant the first one's keys.
        let rows = self
            .pool
            .run_retrying("claim", |c| async move {
                c.query(&c.stmts.claim, &params).await
            })
            .await?;
        let mut claimed = Claimed {
            granted: Vec::with_capacity(rows.len()),
            next_expiry: None,
        };
        for row in &rows {
            match row.get::<_, Option<String>>(0) {
                Some(key) => claimed.granted.push((
                    key,
                    Granted {
                        fence: row.get(1),
                        expires_at: row.get(2),
                        metadata: parse_metadata(row.get(3))?,
                    },
                )),
                None => {
                    claimed.next_expiry = row
                        .get::<_, Option<i64>>(4)
                        .map(|ms| Duration::from_millis(ms.max(0) as u64))
                }
            }
        }
        claimed.granted.sort_by_key(|(_, g)| g.fence);
        Ok(claimed)
    }

    async fn counts(&self, namespace: &str, pool: &str) -> Result<PoolCounts> {
        let params: [&(dyn ToSql + Sync); 2] = [&namespace, &pool];
        let row = self
            .pool
            .run_retrying("counts", |c| async move {
                c.query_one(&c.stmts.counts, &params).await
            })
            .await?;
        let n = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
        Ok(PoolCounts {
            free: n(0),
            held: n(1),
            done: n(2),
        })
    }

    fn max_payload(&self) -> usize {
        super::MAX_PAYLOAD
    }

    async fn listen(&self, channel: &str) -> Result<()> {
        self.listener.listen(channel).await
    }

    async fn unlisten(&self, channel: &str) {
        self.listener.unlisten(channel).await
    }

    async fn watch_wakeups(&self) -> Result<()> {
        self.listener.watch_wakeups().await
    }

    fn wake_secret(&self) -> Option<String> {
        self.wake_secret.clone()
    }

    async fn listening_channels(&self) -> Result<Vec<String>> {
        self.listener.listening_channels().await
    }

    fn close(&self) {
        self.listener.close();
        self.pool.close();
    }
}

/// Brings the schema to the version this library needs, serialized across processes by an
/// advisory lock held for the migration's transaction.
async fn migrate(
    client: &mut tokio_postgres::Client,
    schema: &str,
    allowed: bool,
    display: &str,
) -> Result<()> {
    let target = sql::current_version();
    let fail = |what: &str, e: tokio_postgres::Error| pool::classify(display, what, e).into_error();
    refuse_read_only(client, display)
        .await
        .map_err(|e| e.unwrap_or_else(|e| fail("server check", e)))?;
    let (current, keeps) = installed_version(client, schema)
        .await
        .map_err(|e| fail("schema check", e))?;
    if !schema_behind(schema, current, keeps)? {
        return Ok(());
    }
    let behind = |remedy: &str| {
        Error::new(
            ErrorKind::Database,
            format!(
                "schema {schema:?} is at version {current}, this accord needs version {target}; \
                 {remedy}"
            ),
        )
    };
    if !allowed {
        return Err(behind(
            "apply `accord migrate --print-sql` or connect with migrations enabled",
        ));
    }
    // A role with DML rights only (least privilege) cannot migrate: say so in the words of the
    // path with migrations off, not with the first refused statement's raw message.
    let fail = |what: &str, e: tokio_postgres::Error| {
        if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) {
            let refused = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_string());
            return behind(&format!(
                "this role may not migrate it ({refused}): apply `accord migrate --print-sql` \
                 as the schema's owner, or connect once with a role that may"
            ));
        }
        fail(what, e)
    };
    let tx = client
        .transaction()
        .await
        .map_err(|e| fail("migration", e))?;
    // Simple queries only (literals, no parameters): nothing is prepared, so a
    // transaction-pooling PgBouncer leaves no statement of ours on a server connection.
    tx.batch_execute(&sql::migration_lock_sql(schema))
        .await
        .map_err(|e| fail("migration lock", e))?;
    tx.batch_execute(&sql::bootstrap(schema))
        .await
        .map_err(|e| fail("migration (creating the schema)", e))?;
    // Another process may have migrated while we waited for the lock (a newer one, even).
    let (current, keeps) = installed_version(&tx, schema)
        .await
        .map_err(|e| fail("migration", e))?;
    schema_behind(schema, current, keeps)?;
    for (i, step) in sql::migrations(schema).iter().enumerate() {
        let version = i32::try_from(i + 1).expect("few migrations");
        if version <= current {
            continue;
        }
        tracing::info!(target: "accord", schema, version, "applying migration");
        for statement in step {
            tx.batch_execute(statement)
                .await
                .map_err(|e| fail(&format!("migration to version {version}"), e))?;
        }
        tx.batch_execute(&sql::record_version(schema, version))
            .await
            .map_err(|e| fail("migration", e))?;
    }
    tx.commit().await.map_err(|e| fail("migration commit", e))?;
    Ok(())
}

/// Refuses a server whose sessions cannot write: a standby in recovery (a URL that names it
/// alone, or several hosts without `target_session_attrs=read-write`) or sessions read-only by
/// default. Found at connect, instead of at the first grant with "cannot execute … in a
/// read-only transaction". `Err(Err(_))`: the check itself failed.
async fn refuse_read_only(
    client: &tokio_postgres::Client,
    display: &str,
) -> Result<(), Result<Error, tokio_postgres::Error>> {
    let messages = client
        .simple_query("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
        .await
        .map_err(Err)?;
    let Some((recovery, read_only)) = messages.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => Some((row.get(0)?, row.get(1)?)),
        _ => None,
    }) else {
        return Ok(());
    };
    let why = if recovery == "t" {
        "is a read-only server (a standby in recovery): name the primary, or list every node \
         with target_session_attrs=read-write in the URL"
    } else if read_only == "on" {
        "opens read-only sessions (default_transaction_read_only is on for this role, database \
         or server): accord writes on every grant"
    } else {
        return Ok(());
    };
    Err(Ok(Error::new(
        ErrorKind::Connection,
        format!("PostgreSQL at {display} {why}"),
    )))
}

/// Whether the schema is behind this accord (`rules::schema_fit`); a schema too new for it is
/// refused, one newer that keeps its clients is run on as it is.
fn schema_behind(schema: &str, installed: i32, keeps: Option<i32>) -> Result<bool> {
    let mine = sql::current_version();
    match rules::schema_fit(mine, installed, keeps) {
        SchemaFit::Behind => Ok(true),
        SchemaFit::Current => Ok(false),
        SchemaFit::NewerCompatible => {
            tracing::info!(target: "accord", schema, installed, mine, "the schema is newer than this accord and keeps its clients working");
            Ok(false)
        }
        SchemaFit::TooNew { compatible_from } => Err(rules::too_new_error(
            &format!("schema {schema:?}"),
            installed,
            compatible_from,
            mine,
        )),
    }
}

/// The newest applied version (0: none) and the oldest client version it keeps working.
async fn installed_version(
    client: &impl tokio_postgres::GenericClient,
    schema: &str,
) -> Result<(i32, Option<i32>), tokio_postgres::Error> {
    match client.simple_query(&sql::installed_version(schema)).await {
        Ok(messages) => Ok(messages
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some((
                    row.get(0)?.parse().ok()?,
                    row.get(1).and_then(|v| v.parse().ok()),
                )),
                _ => None,
            })
            .unwrap_or((0, None))),
        Err(e) => match e.code() {
            // No schema or no version table yet: nothing is installed.
            Some(c)
                if *c == tokio_postgres::error::SqlState::UNDEFINED_TABLE
                    || *c == tokio_postgres::error::SqlState::INVALID_SCHEMA_NAME =>
            {
                Ok((0, None))
            }
            _ => Err(e),
        },
    }
}

/// The rows of `list_keys` or `list_holders`.
fn lease_infos(rows: Vec<tokio_postgres::Row>) -> Result<Vec<LeaseInfo>> {
    rows.iter()
        .map(|row| {
            Ok(LeaseInfo {
                key: row.get(0),
                state: match row.get::<_, &str>(1) {
                    "held" => KeyState::Held,
                    "done" => KeyState::Done,
                    _ => KeyState::Free,
                },
                owner: row.get(2),
                fence: row.get(3),
                expires_at: row.get(4),
                metadata: parse_metadata(row.get(5))?,
                updated_at: row.get(6),
                shared: row.get(7),
            })
        })
        .collect()
}

/// A `ListQuery` as `list_keys`' parameters.
struct ListParams {
    state: Option<&'static str>,
    metadata: Option<String>,
    from: String,
    below: Option<String>,
    after: Option<(String, i64)>,
    limit: i64,
    undone_only: bool,
    owned_only: bool,
}

impl ListParams {
    fn after(&self) -> (Option<&str>, Option<i64>) {
        match &self.after {
            Some((key, fence)) => (Some(key.as_str()), Some(*fence)),
            None => (None, None),
        }
    }
}
