//! The one listening connection of a client: LISTENs reference-counted per channel, notifications
//! handed to the core as they arrive, and a supervisor that reconnects with backoff and jitter,
//! re-LISTENs everything, and reports `Reconnected` (a gap may have occurred).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{watch, OnceCell};
use tokio_postgres::{AsyncMessage, Client};
use tokio_util::sync::CancellationToken;

use super::connect::ConnectSpec;
use super::sql::quote_ident;
use crate::backend::{BackendEvent, EventSink};
use crate::error::{Error, ErrorKind, Result};

/// A silent connection is probed this often; a probe unanswered for `PROBE_TIMEOUT` means the
/// connection is dead even if TCP has not noticed yet.
const PROBE_EVERY: Duration = Duration::from_secs(10);
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

struct State {
    client: Option<Arc<Client>>,
    /// Channel → number of `listen` calls that want it.
    channels: HashMap<String, usize>,
}

pub(crate) struct Listener {
    spec: ConnectSpec,
    sink: Arc<dyn EventSink>,
    wakeup_channel: String,
    state: tokio::sync::Mutex<State>,
    /// Bumped (under the state lock) each time a connection is up with every channel LISTENed.
    generation: watch::Sender<u64>,
    started: std::sync::Once,
    wakeups: OnceCell<()>,
    command_timeout: Duration,
    shutdown: CancellationToken,
}

impl Listener {
    pub fn new(
        spec: ConnectSpec,
        sink: Arc<dyn EventSink>,
        wakeup_channel: String,
        command_timeout: Duration,
    ) -> Arc<Listener> {
        Arc::new(Listener {
            spec,
            sink,
            wakeup_channel,
            state: tokio::sync::Mutex::new(State {
                client: None,
                channels: HashMap::new(),
            }),
            generation: watch::channel(0).0,
            started: std::sync::Once::new(),
            wakeups: OnceCell::new(),
            command_timeout,
            shutdown: CancellationToken::new(),
        })
    }

    /// The listening connection is opened on first need, not at connect: most clients of a
    /// fleet never wait or listen.
    fn ensure_started(self: &Arc<Self>) {
        self.started.call_once(|| {
            let this = self.clone();
            tokio::spawn(async move { this.supervise().await });
        });
    }

    pub async fn watch_wakeups(self: &Arc<Self>) -> Result<()> {
        let channel = self.wakeup_channel.clone();
        self.wakeups
            .get_or_try_init(|| self.listen(&channel))
            .await
            .map(|_| ())
    }

    pub async fn listen(self: &Arc<Self>, channel: &str) -> Result<()> {
        self.ensure_started();
        let mut state = self.state.lock().await;
        let count = state.channels.entry(channel.to_string()).or_insert(0);
        *count += 1;
        if *count > 1 {
            // Already LISTENed: under this lock, an earlier call either confirmed it or is
            // waiting for a reconnect that will include it.
            drop(state);
            return self.await_listening().await;
        }
        if let Some(client) = state.client.clone() {
            let sql = format!("LISTEN {}", quote_ident(channel));
            match tokio::time::timeout(self.command_timeout, client.batch_execute(&sql)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) if e.as_db_error().is_some() => {
                    state.channels.remove(channel);
                    return Err(Error::new(
                        ErrorKind::Database,
                        format!("LISTEN {channel:?} refused: {e}"),
                    ));
                }
                // The connection is failing: the supervisor reconnects and LISTENs again.
                _ => {}
            }
        }
        let generation = *self.generation.borrow();
        drop(state);
        match self.await_generation_after(generation).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.unlisten(channel).await;
                Err(e)
            }
        }
    }

    /// Returns once a connection is up with every registered channel LISTENed.
    async fn await_listening(&self) -> Result<()> {
        let state = self.state.lock().await;
        if state.client.is_some() {
            return Ok(());
        }
        let generation = *self.generation.borrow();
        drop(state);
        self.await_generation_after(generation).await
    }

    async fn await_generation_after(&self, generation: u64) -> Result<()> {
        let mut rx = self.generation.subscribe();
        let wait = rx.wait_for(|g| *g > generation);
        tokio::select! {
            r = tokio::time::timeout(self.spec_timeout(), wait) => match r {
                Ok(Ok(_)) => Ok(()),
                _ => Err(Error::new(
                    ErrorKind::Connection,
                    format!("could not open the listening connection to PostgreSQL at {}", self.spec.display),
                )),
            },
            _ = self.shutdown.cancelled() => Err(Error::closed()),
        }
    }

    fn spec_timeout(&self) -> Duration {
        self.command_timeout
    }

    pub async fn unlisten(&self, channel: &str) {
        let mut state = self.state.lock().await;
        let Some(count) = state.channels.get_mut(channel) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        state.channels.remove(channel);
        if let Some(client) = state.client.clone() {
            let sql = format!("UNLISTEN {}", quote_ident(channel));
            // A failure here means the connection is going away, which unlistens too.
            let _ = tokio::time::timeout(self.command_timeout, client.batch_execute(&sql)).await;
        }
    }

    pub async fn listening_channels(&self) -> Result<Vec<String>> {
        let client = self.state.lock().await.client.clone();
        let Some(client) = client else {
            return Ok(Vec::new());
        };
        let rows = client
            .query("SELECT pg_listening_channels()", &[])
            .await
            .map_err(|e| Error::new(ErrorKind::Connection, format!("listening channels: {e}")))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub fn close(&self) {
        self.shutdown.cancel();
    }

    async fn supervise(self: Arc<Self>) {
        let mut backoff = BACKOFF_MIN;
        let mut connected_before = false;
        while !self.shutdown.is_cancelled() {
            match self.connect_and_listen().await {
                Ok(connected) => {
                    backoff = BACKOFF_MIN;
                    if connected_before {
                        tracing::info!(target: "accord", server = %self.spec.display, "listening connection re-established");
                        self.sink.deliver(BackendEvent::Reconnected);
                    } else {
                        tracing::debug!(target: "accord", server = %self.spec.display, "listening connection open");
                    }
                    connected_before = true;
                    self.watch(connected).await;
                    self.state.lock().await.client = None;
                    if self.shutdown.is_cancelled() {
                        break;
                    }
                    tracing::warn!(target: "accord", server = %self.spec.display, "listening connection lost; reconnecting");
                }
                Err(e) => {
                    tracing::warn!(target: "accord", error = %e, retry_in_ms = backoff.as_millis() as u64, "listening connection failed");
                }
            }
            // Jitter spreads a fleet's reconnects after a server restart.
            let pause = backoff.mul_f64(rand::rng().random_range(0.5..1.5));
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.shutdown.cancelled() => break,
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
        self.state.lock().await.client = None;
    }

    async fn connect_and_listen(&self) -> Result<Live> {
        let sink = self.sink.clone();
        let wakeup_channel = self.wakeup_channel.clone();
        let connected = self
            .spec
            .connect(move |message| {
                if let AsyncMessage::Notification(n) = message {
                    sink.deliver(to_event(&wakeup_channel, n.channel(), n.payload()));
                }
            })
            .await?;
        let client = Arc::new(connected.client);
        let mut state = self.state.lock().await;
        let sql: String = state
            .channels
            .keys()
            .map(|c| format!("LISTEN {};", quote_ident(c)))
            .collect();
        if !sql.is_empty() {
            match tokio::time::timeout(self.command_timeout, client.batch_execute(&sql)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(Error::new(
                        ErrorKind::Connection,
                        format!("re-LISTEN failed: {e}"),
                    ))
                }
                Err(_) => return Err(Error::new(ErrorKind::Connection, "re-LISTEN timed out")),
            }
        }
        state.client = Some(client.clone());
        self.generation.send_modify(|g| *g += 1);
        drop(state);
        Ok(Live {
            client,
            ended: connected.ended,
            driver: connected.driver,
        })
    }

    /// Waits until the connection ends, fails a probe, or the client closes.
    async fn watch(&self, live: Live) {
        let Live {
            client,
            mut ended,
            driver,
        } = live;
        loop {
            tokio::select! {
                _ = &mut ended => return,
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(PROBE_EVERY) => {
                    if !matches!(tokio::time::timeout(PROBE_TIMEOUT, client.simple_query("")).await, Ok(Ok(_))) {
                        tracing::warn!(target: "accord", "listening connection did not answer a probe");
                        drop(driver);
                        return;
                    }
                }
            }
        }
    }
}

/// A connection up with every channel LISTENed.
struct Live {
    client: Arc<Client>,
    ended: tokio::sync::oneshot::Receiver<()>,
    driver: tokio_util::task::AbortOnDropHandle<()>,
}

fn to_event(wakeup_channel: &str, channel: &str, payload: &str) -> BackendEvent {
    if channel == wakeup_channel {
        if let Some(wakeup) = crate::backend::parse_wakeup(payload) {
            return wakeup;
        }
    }
    BackendEvent::Notification {
        channel: channel.to_string(),
        payload: payload.to_string(),
    }
}
