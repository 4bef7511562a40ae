//! The command connections: a fixed number, each shared by every concurrent call (tokio-postgres
//! pipelines them), with statements prepared once per connection so that each operation costs
//! one round trip. A broken connection is replaced on next use.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, Statement};
use tokio_util::task::AbortOnDropHandle;

use super::connect::{ConnectSpec, Connected};
use super::sql::Sql;
use super::streams::{StreamSql, StreamStatements};
use crate::error::{Error, ErrorKind, Result};

pub(crate) struct Prepared {
    pub acquire: Statement,
    pub acquire_queued: Statement,
    pub leave_queue: Statement,
    pub release_shared: Statement,
    pub holder: Statement,
    pub renew: Statement,
    pub renew_batch: Statement,
    pub release: Statement,
    pub done: Statement,
    pub release_batch: Statement,
    pub done_batch: Statement,
    pub reset: Statement,
    pub notify: Statement,
    pub offer: Statement,
    pub claim: Statement,
    pub counts: Statement,
}

pub(crate) struct Conn {
    pub client: Client,
    _driver: AbortOnDropHandle<()>,
    pub stmts: Prepared,
    /// The stream statements, prepared at the first stream operation on this connection.
    streams: tokio::sync::OnceCell<StreamStatements>,
    inflight: AtomicUsize,
    broken: AtomicBool,
}

impl Conn {
    /// The stream statements, prepared on first use.
    pub async fn streams(
        &self,
        sql: &StreamSql,
    ) -> Result<&StreamStatements, tokio_postgres::Error> {
        self.streams
            .get_or_try_init(|| sql.prepare(&self.client))
            .await
    }

    fn usable(&self) -> bool {
        !self.broken.load(Ordering::Relaxed) && !self.client.is_closed()
    }
}

struct Slot {
    conn: Mutex<Option<Arc<Conn>>>,
    /// Serializes reconnects of this slot so that concurrent callers share one attempt.
    reconnecting: tokio::sync::Mutex<()>,
}

pub(crate) struct Pool {
    spec: ConnectSpec,
    sql: Arc<Sql>,
    slots: Vec<Slot>,
    statement_timeout: Duration,
    slow_statement: Duration,
    closed: AtomicBool,
}

/// How a statement failed, deciding whether it may be retried on a fresh connection.
pub(crate) enum Failure {
    /// The connection broke or stalled; the statement may or may not have run.
    Connection(Error),
    /// The server answered with an error; retrying would give the same answer.
    Final(Error),
}

impl Failure {
    pub fn into_error(self) -> Error {
        match self {
            Failure::Connection(e) | Failure::Final(e) => e,
        }
    }
}

impl Pool {
    pub fn new(
        spec: ConnectSpec,
        sql: Arc<Sql>,
        size: usize,
        statement_timeout: Duration,
        slow_statement: Duration,
    ) -> Pool {
        let slots = (0..size)
            .map(|_| Slot {
                conn: Mutex::new(None),
                reconnecting: tokio::sync::Mutex::new(()),
            })
            .collect();
        Pool {
            spec,
            sql,
            slots,
            statement_timeout,
            slow_statement,
            closed: AtomicBool::new(false),
        }
    }

    /// The statements' text.
    pub fn sql(&self) -> &Sql {
        &self.sql
    }

    /// Opens every connection (so that a bad URL or password fails at connect time).
    pub async fn warm_up(&self) -> Result<()> {
        let all = (0..self.slots.len()).map(|i| self.slot_conn(i));
        for r in futures_util::future::join_all(all).await {
            r?;
        }
        Ok(())
    }

    async fn open(&self) -> Result<Arc<Conn>> {
        let connected = self.spec.connect(|_| {}).await?;
        self.prepare(connected).await
    }

    /// Puts an already open connection (the one that ran migrations) into the first slot.
    pub async fn adopt(&self, connected: Connected) -> Result<()> {
        let conn = self.prepare(connected).await?;
        *self.slots[0].conn.lock().unwrap() = Some(conn);
        Ok(())
    }

    async fn prepare(&self, connected: Connected) -> Result<Arc<Conn>> {
        let Connected { client, driver, .. } = connected;
        let sql = &self.sql;
        let prep = |text: &str| {
            let text = text.to_string();
            let client = &client;
            async move { client.prepare(&text).await }
        };
        // Prepared concurrently: one pipelined round trip instead of one per statement.
        let r = tokio::try_join!(
            prep(&sql.acquire),
            prep(&sql.acquire_queued),
            prep(&sql.leave_queue),
            prep(&sql.release_shared),
            prep(&sql.holder),
            prep(&sql.renew),
            prep(&sql.renew_batch),
            prep(&sql.release),
            prep(&sql.done),
            prep(&sql.release_batch),
            prep(&sql.done_batch),
            prep(&sql.reset),
            prep(sql.notify),
            prep(&sql.offer),
            prep(&sql.claim),
            prep(&sql.counts),
        );
        let (
            acquire,
            acquire_queued,
            leave_queue,
            release_shared,
            holder,
            renew,
            renew_batch,
            release,
            done,
            release_batch,
            done_batch,
            reset,
            notify,
            offer,
            claim,
            counts,
        ) = r.map_err(|e| classify(&self.spec.display, "preparing statements", e).into_error())?;
        Ok(Arc::new(Conn {
            client,
            _driver: driver,
            stmts: Prepared {
                acquire,
                acquire_queued,
                leave_queue,
                release_shared,
                holder,
                renew,
                renew_batch,
                release,
                done,
                release_batch,
                done_batch,
                reset,
                notify,
                offer,
                claim,
                counts,
            },
            streams: tokio::sync::OnceCell::new(),
            inflight: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
        }))
    }

    async fn slot_conn(&self, i: usize) -> Result<Arc<Conn>> {
        let slot = &self.slots[i];
        if let Some(c) = slot.conn.lock().unwrap().as_ref().filter(|c| c.usable()) {
            return Ok(c.clone());
        }
        let _guard = slot.reconnecting.lock().await;
        if let Some(c) = slot.conn.lock().unwrap().as_ref().filter(|c| c.usable()) {
            return Ok(c.clone());
        }
        let had_one = slot.conn.lock().unwrap().take().is_some();
        let conn = self.open().await?;
        if had_one {
            tracing::info!(target: "accord", server = %self.spec.display, "command connection re-established");
        }
        *slot.conn.lock().unwrap() = Some(conn.clone());
        Ok(conn)
    }

    /// The usable connection with the fewest statements in flight, or a fresh one.
    async fn pick(&self) -> Result<Arc<Conn>> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(Error::closed());
        }
        let mut best: Option<Arc<Conn>> = None;
        let mut broken_slot = None;
        for (i, slot) in self.slots.iter().enumerate() {
            match slot.conn.lock().unwrap().as_ref() {
                Some(c) if c.usable() => {
                    let load = c.inflight.load(Ordering::Relaxed);
                    if best
                        .as_ref()
                        .is_none_or(|b| load < b.inflight.load(Ordering::Relaxed))
                    {
                        best = Some(c.clone());
                    }
                }
                _ => broken_slot = broken_slot.or(Some(i)),
            }
        }
        // Replace a broken connection in the background of this call if others still work.
        if let Some(c) = best {
            if c.inflight.load(Ordering::Relaxed) > 0 {
                if let Some(i) = broken_slot {
                    if let Ok(fresh) = self.slot_conn(i).await {
                        return Ok(fresh);
                    }
                }
            }
            return Ok(c);
        }
        self.slot_conn(broken_slot.unwrap_or(0)).await
    }

    /// Runs one statement on a pooled connection, bounded by the statement timeout; a
    /// connection failure marks the connection broken. `what` names the operation in errors.
    pub async fn run<'a, T, F, Fut>(&'a self, what: &str, f: F) -> Result<T, Failure>
    where
        F: FnOnce(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + 'a,
    {
        let conn = self.pick().await.map_err(|e| match e.kind() {
            ErrorKind::Closed => Failure::Final(e),
            _ => Failure::Connection(e),
        })?;
        conn.inflight.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = tokio::time::timeout(self.statement_timeout, f(conn.clone())).await;
        conn.inflight.fetch_sub(1, Ordering::Relaxed);
        let elapsed = started.elapsed();
        if elapsed >= self.slow_statement {
            tracing::warn!(target: "accord", operation = what, elapsed_ms = elapsed.as_millis() as u64, "slow statement");
        }
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                let failure = classify(&self.spec.display, what, e);
                if matches!(failure, Failure::Connection(_)) {
                    conn.broken.store(true, Ordering::Relaxed);
                }
                Err(failure)
            }
            Err(_) => {
                // A stalled connection stalls everything pipelined on it: replace it.
                conn.broken.store(true, Ordering::Relaxed);
                Err(Failure::Connection(Error::new(
                    ErrorKind::Connection,
                    format!(
                        "{what}: no answer from PostgreSQL at {} within {:?}",
                        self.spec.display, self.statement_timeout
                    ),
                )))
            }
        }
    }

    /// Like [`Pool::run`], trying once more on a fresh connection if the first one broke.
    /// Only for statements that are safe to repeat.
    pub async fn run_retrying<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
    where
        F: Fn(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        match self.run(what, &f).await {
            Ok(v) => Ok(v),
            Err(Failure::Final(e)) => Err(e),
            Err(Failure::Connection(first)) => {
                tracing::debug!(target: "accord", operation = what, error = %first, "retrying on a fresh connection");
                self.run(what, &f).await.map_err(Failure::into_error)
            }
        }
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        for slot in &self.slots {
            slot.conn.lock().unwrap().take();
        }
    }
}

pub(crate) fn classify(display: &str, what: &str, e: tokio_postgres::Error) -> Failure {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        // Class 08 (connection exception), 57P01..03 (admin shutdown, crash, cannot connect
        // now): the server went away, not the statement.
        let transient = code.starts_with("08") || code.starts_with("57P");
        let err = Error::new(
            if transient {
                ErrorKind::Connection
            } else {
                ErrorKind::Database
            },
            format!("{what}: PostgreSQL error {code}: {}", db.message()),
        );
        let err = err.with_source(e);
        return if transient {
            Failure::Connection(err)
        } else {
            Failure::Final(err)
        };
    }
    Failure::Connection(
        Error::new(
            ErrorKind::Connection,
            format!("{what}: connection to PostgreSQL at {display} failed: {e}"),
        )
        .with_source(e),
    )
}
