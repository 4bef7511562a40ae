//! Durable streams on the embedded store: the same tables and answers as on PostgreSQL. One
//! writer at a time (the IMMEDIATE transaction) orders publishes, so the stream's row needs no
//! lock of its own; a read is one deferred transaction, so its two queries see one snapshot.

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use super::store::db_error;
use super::{add_event, time, SqliteBackend};
use async_trait::async_trait;

use crate::backend::{
    millis, PublishItem, Published, StoredEvent as StreamEvent, StreamPage, StreamState,
    StreamStore,
};
use crate::error::{Error, Result};

/// The stream's newest seq, first stored seq and rule; `None` when never published nor ruled.
fn state(conn: &Connection, ns: &str, stream: &str) -> Result<Option<StreamState>> {
    let row: Option<(i64, Option<i64>, Option<i64>)> = conn
        .query_row(
            "SELECT last_seq, max_len, max_age_ms FROM streams WHERE namespace = ?1 AND stream = ?2",
            params![ns, stream],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(|e| db_error("stream state", e))?;
    let Some((last_seq, max_len, max_age_ms)) = row else {
        return Ok(None);
    };
    let first: Option<i64> = conn
        .query_row(
            "SELECT min(seq) FROM stream_events WHERE namespace = ?1 AND stream = ?2",
            params![ns, stream],
            |r| r.get(0),
        )
        .map_err(|e| db_error("stream state", e))?;
    Ok(Some(StreamState {
        first_seq: first.unwrap_or(last_seq + 1),
        last_seq,
        max_len,
        max_age: max_age_ms.map(|ms| Duration::from_millis(ms.max(0) as u64)),
    }))
}

#[async_trait]
impl StreamStore for SqliteBackend {
    async fn publish(&self, namespace: &str, items: &[PublishItem<'_>]) -> Result<Vec<Published>> {
        let ns = namespace.to_string();
        let items: Vec<(String, String, String)> = items
            .iter()
            .map(|i| {
                (
                    i.stream.to_string(),
                    i.payload.to_string(),
                    i.channel.to_string(),
                )
            })
            .collect();
        self.write("publish", move |tx, now| {
            let mut answers = Vec::with_capacity(items.len());
            // Each stream's newest seq and published_at as this transaction moves them.
            let mut newest: std::collections::BTreeMap<&str, (i64, &str)> = Default::default();
            for (stream, payload, channel) in &items {
                let row: Option<(i64, Option<i64>, bool)> = tx
                    .query_row(
                        "SELECT last_seq, published_at_ms,
                                max_len IS NOT NULL OR max_age_ms IS NOT NULL
                           FROM streams WHERE namespace = ?1 AND stream = ?2",
                        params![ns, stream],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()
                    .map_err(|e| db_error("publish", e))?;
                let (last, published, retained) = row.unwrap_or((0, None, false));
                let seq = last + 1;
                // As on PostgreSQL, published_at never goes back within a stream.
                let at = published.map_or(now, |p| p.max(now));
                tx.execute(
                    "INSERT INTO streams (namespace, stream, last_seq, published_at_ms)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (namespace, stream) DO UPDATE
                        SET last_seq = excluded.last_seq, published_at_ms = excluded.published_at_ms",
                    params![ns, stream, seq, at],
                )
                .map_err(|e| db_error("publish", e))?;
                tx.execute(
                    "INSERT INTO stream_events (namespace, stream, seq, payload, published_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![ns, stream, seq, payload.as_bytes(), at],
                )
                .map_err(|e| db_error("publish", e))?;
                newest.insert(stream, (seq, channel));
                answers.push(Published {
                    seq,
                    published_at: time(at),
                    retained,
                });
            }
            for (_, channel) in newest.values() {
                // Empty: it only says "read again" (`stream::stream_channel`).
                add_event(tx, channel, "", now)?;
            }
            Ok((answers, true))
        })
        .await
    }

    async fn read_stream(
        &self,
        namespace: &str,
        stream: &str,
        after: i64,
        limit: usize,
    ) -> Result<StreamPage> {
        let (ns, stream) = (namespace.to_string(), stream.to_string());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(move |conn| {
            let tx = conn.transaction().map_err(|e| db_error("read stream", e))?;
            let last_seq: i64 = tx
                .query_row(
                    "SELECT last_seq FROM streams WHERE namespace = ?1 AND stream = ?2",
                    params![ns, stream],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| db_error("read stream", e))?
                .unwrap_or(0);
            let mut query = tx
                .prepare_cached(
                    "SELECT seq, payload, published_at_ms FROM stream_events
                          WHERE namespace = ?1 AND stream = ?2 AND seq > ?3
                          ORDER BY seq LIMIT ?4",
                )
                .map_err(|e| db_error("read stream", e))?;
            let rows = query
                .query_map(params![ns, stream, after, limit], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(|e| db_error("read stream", e))?;
            let mut events = Vec::new();
            for row in rows {
                let (seq, payload, at) = row.map_err(|e| db_error("read stream", e))?;
                let payload = String::from_utf8(payload)
                    .map_err(|_| Error::internal(format!("stored event {seq} is not UTF-8")))?;
                events.push(StreamEvent {
                    seq,
                    payload,
                    published_at: time(at),
                });
            }
            drop(query);
            tx.commit().map_err(|e| db_error("read stream", e))?;
            Ok(StreamPage { last_seq, events })
        })
        .await
    }

    async fn stream_state(&self, namespace: &str, stream: &str) -> Result<StreamState> {
        let (ns, stream) = (namespace.to_string(), stream.to_string());
        self.run(move |conn| {
            let tx = conn
                .transaction()
                .map_err(|e| db_error("stream state", e))?;
            let found = state(&tx, &ns, &stream)?;
            tx.commit().map_err(|e| db_error("stream state", e))?;
            Ok(found.unwrap_or(StreamState {
                first_seq: 1,
                last_seq: 0,
                max_len: None,
                max_age: None,
            }))
        })
        .await
    }

    async fn set_retention(
        &self,
        namespace: &str,
        stream: &str,
        max_len: Option<i64>,
        max_age: Option<Duration>,
    ) -> Result<()> {
        let (ns, stream) = (namespace.to_string(), stream.to_string());
        let age = max_age.map(millis);
        self.write("set retention", move |tx, _| {
            tx.execute(
                "INSERT INTO streams (namespace, stream, last_seq, max_len, max_age_ms)
                 VALUES (?1, ?2, 0, ?3, ?4)
                 ON CONFLICT (namespace, stream) DO UPDATE
                    SET max_len = excluded.max_len, max_age_ms = excluded.max_age_ms",
                params![ns, stream, max_len, age],
            )
            .map_err(|e| db_error("set retention", e))?;
            Ok(((), false))
        })
        .await
    }

    async fn trim_stream(&self, namespace: &str, stream: &str, limit: usize) -> Result<u64> {
        let (ns, stream) = (namespace.to_string(), stream.to_string());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.write("trim stream", move |tx, now| {
            let Some(rule) = state(tx, &ns, &stream)? else {
                return Ok((0, false));
            };
            let by_len = rule.max_len.map(|n| rule.last_seq - n);
            let by_age: Option<i64> = match rule.max_age {
                None => None,
                Some(age) => tx
                    .query_row(
                        "SELECT max(seq) FROM (SELECT seq, published_at_ms FROM stream_events
                                                WHERE namespace = ?1 AND stream = ?2
                                                ORDER BY seq LIMIT ?3)
                          WHERE published_at_ms < ?4",
                        params![ns, stream, limit, now - millis(age)],
                        |r| r.get(0),
                    )
                    .map_err(|e| db_error("trim stream", e))?,
            };
            let Some(upto) = by_len.max(by_age) else {
                return Ok((0, false));
            };
            // At most `limit` events per transaction: the oldest ones.
            let upto = upto.min(rule.first_seq.saturating_add(limit - 1));
            let gone = tx
                .execute(
                    "DELETE FROM stream_events WHERE namespace = ?1 AND stream = ?2 AND seq <= ?3",
                    params![ns, stream, upto],
                )
                .map_err(|e| db_error("trim stream", e))?;
            Ok((gone as u64, false))
        })
        .await
    }

    async fn ack(&self, namespace: &str, stream: &str, consumer: &str, seq: i64) -> Result<()> {
        let (ns, stream, consumer) = (
            namespace.to_string(),
            stream.to_string(),
            consumer.to_string(),
        );
        self.write("ack", move |tx, now| {
            tx.execute(
                "INSERT INTO stream_acks (namespace, stream, consumer, seq, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (namespace, stream, consumer) DO UPDATE
                    SET seq = max(seq, excluded.seq), updated_at_ms = excluded.updated_at_ms",
                params![ns, stream, consumer, seq, now],
            )
            .map_err(|e| db_error("ack", e))?;
            Ok(((), false))
        })
        .await
    }

    async fn acked(&self, namespace: &str, stream: &str, consumer: &str) -> Result<Option<i64>> {
        let (ns, stream, consumer) = (
            namespace.to_string(),
            stream.to_string(),
            consumer.to_string(),
        );
        self.run(move |conn| {
            conn.query_row(
                "SELECT seq FROM stream_acks
                      WHERE namespace = ?1 AND stream = ?2 AND consumer = ?3",
                params![ns, stream, consumer],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_error("read ack", e))
        })
        .await
    }
}
