//! Durable streams on PostgreSQL: the statements, prepared on a connection the first time a
//! stream operation runs on it (clients that never publish pay nothing at connect).
//!
//! Seqs follow commit order. A publisher takes its seqs by updating the stream's row, which it
//! holds locked until its transaction has committed and become visible; the next publisher of
//! the stream waits for that lock and reads the newest seq after it. So no snapshot ever sees
//! seq 8 without seq 7, and a reader that resumes after the last seq it saw misses nothing.
//! A sequence object would not do: its values are handed out in call order, and a transaction
//! that took 7 can commit after one that took 8. Publishers of different streams never wait
//! for each other; one statement carries many events (the client's group commit).

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use super::pool::Stmt;
use super::sql::{param_types, quote_ident};
use async_trait::async_trait;

use crate::backend::{
    millis, PublishItem, Published, StoredEvent, StreamPage, StreamState, StreamStore,
};
use crate::error::{Error, Result};

/// The statements' text.
pub(crate) struct StreamSql {
    pub publish: String,
    pub read: String,
    pub state: String,
    pub set_retention: String,
    pub trim: String,
    pub ack: String,
    pub acked: String,
}

/// The statements, prepared on one connection.
pub(crate) struct StreamStatements {
    pub publish: Stmt,
    pub read: Stmt,
    pub state: Stmt,
    pub set_retention: Stmt,
    pub trim: Stmt,
    pub ack: Stmt,
    pub acked: Stmt,
}

impl StreamSql {
    pub fn new(schema: &str) -> StreamSql {
        let s = quote_ident(schema);
        StreamSql {
            // $1 namespace; $2, $3, $4: each event's stream, payload and wake-up channel.
            // `advanced` takes each stream's seqs under its row lock (streams in name order, so
            // two batches never wait for each other in a cycle). ON CONFLICT DO UPDATE reads
            // the newest version of the row once it holds the lock, so `last_seq` here is the
            // one the previous publisher committed. `published_at` never goes back within a
            // stream (retention by age trims a prefix). One wake-up per stream, empty (any role
            // may listen: it names nothing, and only says "read again"): the table is the truth.
            publish: format!(
                "WITH input AS (
                   SELECT i.stream, i.payload, i.channel, i.n,
                          row_number() OVER (PARTITION BY i.stream ORDER BY i.n) AS k,
                          count(*) OVER (PARTITION BY i.stream) AS c
                     FROM unnest($2::text[], $3::bytea[], $4::text[])
                          WITH ORDINALITY AS i(stream, payload, channel, n)),
                 advanced AS (
                   INSERT INTO {s}.streams AS st (namespace, stream, last_seq, published_at)
                   SELECT $1, i.stream, max(i.c), clock_timestamp()
                     FROM input i GROUP BY i.stream ORDER BY i.stream
                   ON CONFLICT (namespace, stream) DO UPDATE
                      SET last_seq = st.last_seq + EXCLUDED.last_seq,
                          published_at = GREATEST(EXCLUDED.published_at, st.published_at)
                   RETURNING st.stream, st.last_seq, st.published_at,
                             (st.max_len IS NOT NULL OR st.max_age_ms IS NOT NULL) AS retained),
                 stored AS (
                   INSERT INTO {s}.stream_events (namespace, stream, seq, payload, published_at)
                   SELECT $1, i.stream, a.last_seq - i.c + i.k, i.payload, a.published_at
                     FROM input i JOIN advanced a ON a.stream = i.stream
                   RETURNING 1),
                 woken AS (
                   SELECT count(pg_notify(w.channel, '')) AS n
                     FROM (SELECT DISTINCT stream, channel FROM input) w
                     JOIN advanced a ON a.stream = w.stream)
                 SELECT a.last_seq - i.c + i.k, a.published_at, a.retained,
                        (SELECT n FROM woken), (SELECT count(*) FROM stored)
                   FROM input i JOIN advanced a ON a.stream = i.stream
                  ORDER BY i.n"
            ),
            // One snapshot: the stream's newest seq and the page after $3, so that a missing
            // seq can only mean a trimmed one.
            read: format!(
                "SELECT st.last_seq, e.seq, e.payload, e.published_at
                   FROM {s}.streams st
                   LEFT JOIN LATERAL (
                        SELECT ev.seq, ev.payload, ev.published_at FROM {s}.stream_events ev
                         WHERE ev.namespace = st.namespace AND ev.stream = st.stream
                           AND ev.seq > $3
                         ORDER BY ev.seq LIMIT $4) e ON true
                  WHERE st.namespace = $1 AND st.stream = $2
                  ORDER BY e.seq"
            ),
            state: format!(
                "SELECT st.last_seq,
                        COALESCE((SELECT min(ev.seq) FROM {s}.stream_events ev
                                   WHERE ev.namespace = $1 AND ev.stream = $2), st.last_seq + 1),
                        st.max_len, st.max_age_ms
                   FROM {s}.streams st
                  WHERE st.namespace = $1 AND st.stream = $2"
            ),
            set_retention: format!(
                "INSERT INTO {s}.streams AS st (namespace, stream, last_seq, max_len, max_age_ms)
                 VALUES ($1, $2, 0, $3, $4)
                 ON CONFLICT (namespace, stream) DO UPDATE
                    SET max_len = EXCLUDED.max_len, max_age_ms = EXCLUDED.max_age_ms"
            ),
            // Reads the rule without locking the stream's row (publishers keep going), then
            // deletes a prefix of at most $3 events: those beyond the length, and those older
            // than the age (published_at grows with seq, so they are a prefix too).
            trim: format!(
                "WITH rule AS (
                   SELECT st.last_seq, st.max_len, st.max_age_ms FROM {s}.streams st
                    WHERE st.namespace = $1 AND st.stream = $2),
                 head AS (
                   SELECT ev.seq, ev.published_at FROM {s}.stream_events ev
                    WHERE ev.namespace = $1 AND ev.stream = $2
                    ORDER BY ev.seq LIMIT $3),
                 upto AS (
                   SELECT GREATEST(
                            (SELECT r.last_seq - r.max_len FROM rule r),
                            (SELECT max(h.seq) FROM head h, rule r
                              WHERE h.published_at < clock_timestamp()
                                    - r.max_age_ms * interval '1 millisecond')) AS seq),
                 gone AS (
                   DELETE FROM {s}.stream_events ev USING upto
                    WHERE ev.namespace = $1 AND ev.stream = $2 AND ev.seq <= upto.seq
                      AND ev.seq <= (SELECT max(h.seq) FROM head h)
                   RETURNING 1)
                 SELECT count(*) FROM gone"
            ),
            ack: format!(
                "INSERT INTO {s}.stream_acks AS a (namespace, stream, consumer, seq, updated_at)
                 VALUES ($1, $2, $3, $4, clock_timestamp())
                 ON CONFLICT (namespace, stream, consumer) DO UPDATE
                    SET seq = GREATEST(a.seq, EXCLUDED.seq), updated_at = EXCLUDED.updated_at"
            ),
            acked: format!(
                "SELECT seq FROM {s}.stream_acks
                  WHERE namespace = $1 AND stream = $2 AND consumer = $3"
            ),
        }
    }

    /// Prepares every statement on `client`, pipelined in one round trip.
    pub async fn prepare(
        &self,
        client: &Client,
        prepare: bool,
    ) -> Result<StreamStatements, tokio_postgres::Error> {
        let (publish, read, state, set_retention, trim, ack, acked) = tokio::try_join!(
            Stmt::new(client, &self.publish, param_types::PUBLISH, prepare),
            Stmt::new(client, &self.read, param_types::READ_STREAM, prepare),
            Stmt::new(client, &self.state, param_types::STREAM_STATE, prepare),
            Stmt::new(
                client,
                &self.set_retention,
                param_types::SET_RETENTION,
                prepare
            ),
            Stmt::new(client, &self.trim, param_types::TRIM_STREAM, prepare),
            Stmt::new(client, &self.ack, param_types::ACK, prepare),
            Stmt::new(client, &self.acked, param_types::ACKED, prepare),
        )?;
        Ok(StreamStatements {
            publish,
            read,
            state,
            set_retention,
            trim,
            ack,
            acked,
        })
    }
}

fn payload_text(bytes: Vec<u8>, seq: i64) -> Result<String> {
    String::from_utf8(bytes)
        .map_err(|_| Error::internal(format!("stored event {seq} is not UTF-8")))
}

#[async_trait]
impl StreamStore for super::PgBackend {
    async fn publish(&self, namespace: &str, items: &[PublishItem<'_>]) -> Result<Vec<Published>> {
        let streams: Vec<&str> = items.iter().map(|i| i.stream).collect();
        let payloads: Vec<&[u8]> = items.iter().map(|i| i.payload.as_bytes()).collect();
        let channels: Vec<&str> = items.iter().map(|i| i.channel).collect();
        let params: [&(dyn ToSql + Sync); 4] = [&namespace, &streams, &payloads, &channels];
        // Not retried: a publish whose answer was lost may have committed, and publishing
        // again would store the events twice. The caller is told the connection failed.
        let rows = self
            .pool
            .run("publish", |c| async move {
                let stmts = c.streams(&self.pool.sql().streams).await?;
                c.query(&stmts.publish, &params).await
            })
            .await
            .map_err(super::pool::Failure::into_error)?;
        Ok(rows
            .iter()
            .map(|r| Published {
                seq: r.get(0),
                published_at: r.get(1),
                retained: r.get(2),
            })
            .collect())
    }

    async fn read_stream(
        &self,
        namespace: &str,
        stream: &str,
        after: i64,
        limit: usize,
    ) -> Result<StreamPage> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let params: [&(dyn ToSql + Sync); 4] = [&namespace, &stream, &after, &limit];
        let rows = self
            .pool
            .run_retrying("read stream", |c| async move {
                let stmts = c.streams(&self.pool.sql().streams).await?;
                c.query(&stmts.read, &params).await
            })
            .await?;
        let mut page = StreamPage {
            last_seq: 0,
            events: Vec::with_capacity(rows.len()),
        };
        for row in rows {
            page.last_seq = row.get(0);
            if let Some(seq) = row.get::<_, Option<i64>>(1) {
                let published_at: DateTime<Utc> = row.get(3);
                page.events.push(StoredEvent {
                    seq,
                    payload: payload_text(row.get(2), seq)?,
                    published_at,
                });
            }
        }
        Ok(page)
    }

    async fn stream_state(&self, namespace: &str, stream: &str) -> Result<StreamState> {
        let params: [&(dyn ToSql + Sync); 2] = [&namespace, &stream];
        let row = self
            .pool
            .run_retrying("stream state", |c| async move {
                let stmts = c.streams(&self.pool.sql().streams).await?;
                c.query_opt(&stmts.state, &params).await
            })
            .await?;
        Ok(match row {
            None => StreamState {
                first_seq: 1,
                last_seq: 0,
                max_len: None,
                max_age: None,
            },
            Some(r) => StreamState {
                last_seq: r.get(0),
                first_seq: r.get(1),
                max_len: r.get(2),
                max_age: r
                    .get::<_, Option<i64>>(3)
                    .map(|ms| Duration::from_millis(ms.max(0) as u64)),
            },
        })
    }

    async fn set_retention(
        &self,
        namespace: &str,
        stream: &str,
        max_len: Option<i64>,
        max_age: Option<Duration>,
    ) -> Result<()> {
        let age = max_age.map(millis);
        let params: [&(dyn ToSql + Sync); 4] = [&namespace, &stream, &max_len, &age];
        self.pool
            .run_retrying("set retention", |c| async move {
                let stmts = c.streams(&self.pool.sql().streams).await?;
                c.execute(&stmts.set_retention, &params).await
            })
            .await?;
        Ok(())
    }

    async fn trim_stream(&self, namespace: &str, stream: &str, limit: usize) -> Result<u64> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let params: [&(dyn ToSql + Sync); 3] = [&namespace, &stream, &limit];
        let row = self
            .pool
            .run_retrying("trim stream", |c| async move {
                let stmts = c.streams(&self.pool.sql().streams).await?;
                c.query_one(&stmts.trim, &params).await
            })
            .await?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    async fn ack(&self, namespace: &str, stream: &str, consumer: &str, seq: i64) -> Result<()> {
        let params: [&(dyn ToSql + Sync); 4] = [&namespace, &stream, &consumer, &seq];
        self.pool
            .run_retrying("ack", |c| async move {
                let stmts = c.streams(&self.pool.sql().streams).await?;
                c.execute(&stmts.ack, &params).await
            })
            .await?;
        Ok(())
    }

    async fn acked(&self, namespace: &str, stream: &str, consumer: &str) -> Result<Option<i64>> {
        let params: [&(dyn ToSql + Sync); 3] = [&namespace, &stream, &consumer];
        let row = self
            .pool
            .run_retrying("read ack", |c| async move {
                let stmts = c.streams(&self.pool.sql().streams).await?;
                c.query_opt(&stmts.acked, &params).await
            })
            .await?;
        Ok(row.map(|r| r.get(0)))
    }
}
