//! The command connections: a fixed number, each shared by every concurrent call (tokio-postgres
//! pipelines them), with statements prepared once per connection so that each operation costs
//! one round trip. A broken connection is replaced on next use.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};
use tokio_util::task::AbortOnDropHandle;

use super::connect::{ConnectSpec, Connected};
use super::sql::{param_types, Sql};
use super::streams::{StreamSql, StreamStatements};
use crate::error::{Error, ErrorKind, Result};
use crate::stats::{Counter, Recorder, Timer};

/// One of accord's statements on one connection: prepared there once (the default: each call
/// then costs one round trip and no planning), or sent with its text every time
/// (`ClientOptions::prepare_statements(false)`), for a PgBouncer in transaction mode before
/// 1.21: it hands each transaction any server connection, so a statement prepared on one is
/// missing on the next, and another process's statement of the same name may be found there.
pub(crate) enum Stmt {
    Prepared(Statement),
    Text {
        text: String,
        types: &'static [Type],
    },
}

impl Stmt {
    /// Prepares `text` on `client`, or keeps it to send. A prepared statement's parameter
    /// types must be the table's (`sql::param_types`): every test that prepares checks it.
    pub async fn new(
        client: &Client,
        text: &str,
        types: &'static [Type],
        prepare: bool,
    ) -> Result<Stmt, tokio_postgres::Error> {
        if !prepare {
            return Ok(Stmt::Text {
                text: text.to_string(),
                types,
            });
        }
        let statement = client.prepare(text).await?;
        debug_assert_eq!(
            statement.params(),
            types,
            "sql::param_types disagrees with PostgreSQL for: {text}"
        );
        Ok(Stmt::Prepared(statement))
    }
}

/// The parameters with the types a statement sent by its text declares.
pub(crate) fn typed<'a>(
    params: &[&'a (dyn ToSql + Sync)],
    types: &[Type],
) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params.iter().copied().zip(types.iter().cloned()).collect()
}

pub(crate) struct Prepared {
    pub acquire: Stmt,
    pub acquire_batch: Stmt,
    pub acquire_queued: Stmt,
    pub leave_queue: Stmt,
    pub release_shared: Stmt,
    pub holder: Stmt,
    pub renew: Stmt,
    pub renew_batch: Stmt,
    pub release: Stmt,
    pub done: Stmt,
    pub release_batch: Stmt,
    pub done_batch: Stmt,
    pub reset: Stmt,
    pub notify: Stmt,
    pub notify_batch: Stmt,
    pub offer: Stmt,
    pub claim: Stmt,
    pub counts: Stmt,
}

pub(crate) struct Conn {
    pub client: Client,
    _driver: AbortOnDropHandle<()>,
    pub stmts: Prepared,
    /// The stream statements, prepared at the first stream operation on this connection.
    streams: tokio::sync::OnceCell<StreamStatements>,
    inflight: AtomicUsize,
    broken: AtomicBool,
    /// Whether statements are prepared (`Stmt`), also the stream statements prepared later.
    prepare: bool,
}

impl Conn {
    /// The stream statements, prepared on first use.
    pub async fn streams(
        &self,
        sql: &StreamSql,
    ) -> Result<&StreamStatements, tokio_postgres::Error> {
        self.streams
            .get_or_try_init(|| sql.prepare(&self.client, self.prepare))
            .await
    }

    pub async fn query(
        &self,
        stmt: &Stmt,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        match stmt {
            Stmt::Prepared(s) => self.client.query(s, params).await,
            Stmt::Text { text, types } => {
                self.client.query_typed(text, &typed(params, types)).await
            }
        }
    }

    pub async fn query_one(
        &self,
        stmt: &Stmt,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        match stmt {
            Stmt::Prepared(s) => self.client.query_one(s, params).await,
            Stmt::Text { text, types } => {
                self.client
                    .query_typed_one(text, &typed(params, types))
                    .await
            }
        }
    }

    pub async fn query_opt(
        &self,
        stmt: &Stmt,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        match stmt {
            Stmt::Prepared(s) => self.client.query_opt(s, params).await,
            Stmt::Text { text, types } => {
                self.client
                    .query_typed_opt(text, &typed(params, types))
                    .await
            }
        }
    }

    pub async fn execute(
        &self,
        stmt: &Stmt,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), tokio_postgres::Error> {
        self.query(stmt, params).await.map(|_| ())
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
    /// Whether statements are prepared on each connection (`Stmt`).
    prepare_statements: bool,
    /// Statements sent and their round trips, reconnections (the client's stats).
    stats: Arc<Recorder>,
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
        prepare_statements: bool,
        stats: Arc<Recorder>,
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
            prepare_statements,
            stats,
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
        let prepare = self.prepare_statements;
        let prep = |text: &str, types: &'static [Type]| {
            let text = text.to_string();
            let client = &client;
            async move { Stmt::new(client, &text, types, prepare).await }
        };
        // Prepared concurrently: one pipelined round trip instead of one per statement.
        let r = tokio::try_join!(
            prep(&sql.acquire, param_types::ACQUIRE),
            prep(&sql.acquire_batch, param_types::ACQUIRE_BATCH),
            prep(&sql.acquire_queued, param_types::ACQUIRE_QUEUED),
            prep(&sql.leave_queue, param_types::LEAVE_QUEUE),
            prep(&sql.release_shared, param_types::RELEASE_SHARED),
            prep(&sql.holder, param_types::HOLDER),
            prep(&sql.renew, param_types::RENEW),
            prep(&sql.renew_batch, param_types::RENEW_BATCH),
            prep(&sql.release, param_types::RELEASE),
            prep(&sql.done, param_types::DONE),
            prep(&sql.release_batch, param_types::RELEASE_BATCH),
            prep(&sql.done_batch, param_types::DONE_BATCH),
            prep(&sql.reset, param_types::RESET),
            prep(sql.notify, param_types::NOTIFY),
            prep(sql.notify_batch, param_types::NOTIFY_BATCH),
            prep(&sql.offer, param_types::OFFER),
            prep(&sql.claim, param_types::CLAIM),
            prep(&sql.counts, param_types::COUNTS),
        );
        let (
            acquire,
            acquire_batch,
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
            notify_batch,
            offer,
            claim,
            counts,
        ) = r.map_err(|e| classify(&self.spec.display, "preparing statements", e).into_error())?;
        Ok(Arc::new(Conn {
            client,
            _driver: driver,
            stmts: Prepared {
                acquire,
                acquire_batch,
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
                notify_batch,
                offer,
                claim,
                counts,
            },
            streams: tokio::sync::OnceCell::new(),
            inflight: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
            prepare,
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
        // The broken connection stays in its slot until a new one is open: a failed attempt
        // (the server still down) must not make the next, successful one look like a first
        // connection, or a restart with a read during the outage counts no reconnect.
        let had_one = slot.conn.lock().unwrap().is_some();
        let conn = self.open().await?;
        if had_one {
            self.stats.add(Counter::Reconnects, 1);
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
        self.stats.add(Counter::Statements, 1);
        self.stats.time(Timer::StatementTime, elapsed);
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
