//! The one listening connection of a client: LISTENs reference-counted per channel, notifications
//! handed to the core as they arrive, and a supervisor that reconnects with backoff and jitter,
//! re-LISTENs everything, and reports `Reconnected` (a gap may have occurred).
//!
//! Each connection proves that it hears before it counts as listening: it LISTENs on a channel
//! of its own, a NOTIFY goes out through the command connections, and it must arrive. Behind a
//! PgBouncer in transaction mode (or with `listen_url` naming another database) LISTEN succeeds
//! and then hears nothing; the probe turns that into an error naming `listen_url` instead of a
//! subscription that stays silent.
//!
//! A connection that is not up within `UP_WITHIN` is reported too: a waiter stops waiting for it
//! and re-checks every second, naming what the connection is stuck on. Behind a PgBouncer in
//! session mode whose server connections are all taken, its LISTEN waits for one to free up
//! (for PgBouncer's `query_wait_timeout`, 120 s by default), and a waiter that waited for it
//! was left until its own deadline.
//!
//! A new connection hears notifications as soon as its LISTEN takes effect, before the probe
//! came back; those are held until then and handed on after `Reconnected`, so that a
//! subscriber never gets a message of the new connection before being told of the gap (the
//! chaos run's listeners caught messages overtaking `Reconnected`).

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
/// How long a new connection waits for its own probe notification.
const PROBE_DELIVERY: Duration = Duration::from_secs(3);
/// After a connection that could not hear, the next attempt waits this long: the cause is the
/// deployment, not a blip. Only a probe that ran its course on a connection that still answers
/// earns this verdict; a connection that failed meanwhile is an ordinary failure (backoff from
/// `BACKOFF_MIN`).
const DEAF_BACKOFF: Duration = Duration::from_secs(30);
/// How long a waiter waits for the listening connection before it re-checks without wake-ups,
/// and how long a LISTEN may wait to run before it is reported: as long as a probe may take
/// to be heard, so that the two ways of not hearing are told within the same bound.
const UP_WITHIN: Duration = PROBE_DELIVERY;
/// Why a LISTEN (or the login before it) may wait without failing: said with every report
/// of a connection not up in time.
const POOLER_HINT: &str = "a pooler in session mode whose server connections are all taken \
     makes it wait for one (PgBouncer: each client holds pool_size + 1 connections; give the \
     pool more server connections than its clients hold, or set listen_url to the server)";

/// Sends a notification through the client's command connections (the probe's other end).
pub(crate) type ProbeSender = Arc<
    dyn Fn(String, String) -> futures_util::future::BoxFuture<'static, Result<()>> + Send + Sync,
>;

/// The probe a connection is waiting to hear: its payload, and whom to tell.
type Expected = Arc<std::sync::Mutex<Option<(String, tokio::sync::oneshot::Sender<()>)>>>;

/// What a connection heard before it counted as listening (`None` once it does: then events go
/// straight to the sink). Delivering under this lock keeps the flush and later events in order.
type Held = Arc<std::sync::Mutex<Option<Vec<BackendEvent>>>>;

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
    /// This listener's probe channel, and how its NOTIFY is sent.
    probe_channel: String,
    probe: ProbeSender,
    /// Why the last connection could not listen; `None` once one can. A deaf server makes
    /// `listen` fail at once (waiting would not help); after an ordinary failure `listen` waits
    /// for the reconnect, and names this reason if that does not come in time.
    failure: watch::Sender<Option<ListenFailure>>,
    /// What the connection being opened is doing now, for a report that it is not up in time.
    stage: std::sync::Mutex<Stage>,
}

/// Where a listening connection being opened stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Connecting,
    Listening,
    Probing,
    Up,
    /// Waiting out the backoff after a failed attempt.
    Retrying,
}

impl Listener {
    pub fn new(
        spec: ConnectSpec,
        sink: Arc<dyn EventSink>,
        wakeup_channel: String,
        command_timeout: Duration,
        probe: ProbeSender,
    ) -> Arc<Listener> {
        Arc::new(Listener {
            probe_channel: format!("accord_probe_{:016x}", rand::random::<u64>()),
            probe,
            failure: watch::channel(None).0,
            stage: std::sync::Mutex::new(Stage::Connecting),
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

    /// Waiters wait for the wake-ups at most `UP_WITHIN`: past it the error says what the
    /// connection is stuck on, and they re-check without wake-ups meanwhile.
    pub async fn watch_wakeups(self: &Arc<Self>) -> Result<()> {
        let channel = self.wakeup_channel.clone();
        self.wakeups
            .get_or_try_init(|| self.listen_within(&channel, UP_WITHIN))
            .await
            .map(|_| ())
    }

    /// `listen` waits for a connection up to the statement timeout, as every call does.
    pub async fn listen(self: &Arc<Self>, channel: &str) -> Result<()> {
        self.listen_within(channel, self.command_timeout).await
    }

    async fn listen_within(self: &Arc<Self>, channel: &str, within: Duration) -> Result<()> {
        self.ensure_started();
        let deadline = tokio::time::Instant::now() + within;
        // The supervisor holds the state while its LISTEN runs: a LISTEN a pooler holds back
        // must not hold this call past its bound.
        let Ok(mut state) = tokio::time::timeout_at(deadline, self.state.lock()).await else {
            return Err(self.not_up(within));
        };
        let count = state.channels.entry(channel.to_string()).or_insert(0);
        *count += 1;
        if *count > 1 {
            // Already LISTENed: under this lock, an earlier call either confirmed it or is
            // waiting for a reconnect that will include it.
            drop(state);
            return self.await_listening(deadline, within).await;
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
        match self
            .await_generation_after(generation, deadline, within)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => {
                // In the background: the state is held while a LISTEN runs, and the caller is
                // told now, not when a LISTEN held back by a pooler gives up.
                let (this, channel) = (self.clone(), channel.to_string());
                tokio::spawn(async move { this.unlisten(&channel).await });
                Err(e)
            }
        }
    }

    /// Returns once a connection is up with every registered channel LISTENed.
    async fn await_listening(
        &self,
        deadline: tokio::time::Instant,
        within: Duration,
    ) -> Result<()> {
        let Ok(state) = tokio::time::timeout_at(deadline, self.state.lock()).await else {
            return Err(self.not_up(within));
        };
        if state.client.is_some() {
            return Ok(());
        }
        let generation = *self.generation.borrow();
        drop(state);
        self.await_generation_after(generation, deadline, within)
            .await
    }

    /// Waits for a connection newer than `generation` until `deadline` (`within` of the call's
    /// start, for the error).
    async fn await_generation_after(
        &self,
        generation: u64,
        deadline: tokio::time::Instant,
        within: Duration,
    ) -> Result<()> {
        let mut rx = self.generation.subscribe();
        let mut failed = self.failure.subscribe();
        let deaf = |f: &Option<ListenFailure>| f.as_ref().is_some_and(|f| f.deaf);
        if let Some(why) = failed.borrow_and_update().as_ref().filter(|f| f.deaf) {
            return Err(Error::new(ErrorKind::Connection, why.why.clone()));
        }
        let wait = rx.wait_for(|g| *g > generation);
        tokio::select! {
            r = tokio::time::timeout_at(deadline, wait) => match r {
                Ok(Ok(_)) => Ok(()),
                _ => Err(self.not_up(within)),
            },
            Ok(why) = failed.wait_for(deaf) => {
                let why = why.as_ref().map(|f| f.why.clone()).unwrap_or_default();
                Err(Error::new(ErrorKind::Connection, why))
            }
            _ = self.shutdown.cancelled() => Err(Error::closed()),
        }
    }

    /// The listening connection is not up after `within`: what it is doing, and the last
    /// reason an attempt failed.
    fn not_up(&self, within: Duration) -> Error {
        let stage = *self.stage.lock().unwrap();
        let doing = match stage {
            Stage::Connecting => "it is still connecting",
            Stage::Listening => "its LISTEN has not run yet",
            Stage::Probing => "it is waiting for its probe notification",
            Stage::Up => "it is reconnecting",
            Stage::Retrying => "it waits to try again after a failed attempt",
        };
        let failure = self.failure.borrow().clone();
        let last = failure
            .as_ref()
            .map(|f| format!("; {}", f.why))
            .unwrap_or_default();
        let held_back = matches!(stage, Stage::Connecting | Stage::Listening)
            || failure.is_some_and(|f| f.stalled);
        let hint = if held_back {
            format!(". If a pooler is in between: {POOLER_HINT}")
        } else {
            String::new()
        };
        Error::new(
            ErrorKind::Connection,
            format!(
                "the listening connection to PostgreSQL at {} is not up after {within:?} \
                 ({doing}){last}{hint}",
                self.spec.display,
            ),
        )
    }

    fn set_stage(&self, stage: Stage) {
        *self.stage.lock().unwrap() = stage;
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
            match self.connect_and_listen(connected_before).await {
                Ok(connected) => {
                    backoff = BACKOFF_MIN;
                    self.failure.send_replace(None);
                    // `Reconnected` was delivered by connect_and_listen, before anything the
                    // new connection heard.
                    if connected_before {
                        tracing::info!(target: "accord", server = %self.spec.display, "listening connection re-established");
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
                Err(Failure::Deaf(why)) => {
                    tracing::error!(target: "accord", error = %why, "the listening connection hears no notifications");
                    self.failure.send_replace(Some(ListenFailure {
                        why,
                        deaf: true,
                        stalled: false,
                    }));
                    backoff = DEAF_BACKOFF;
                }
                Err(Failure::Other(e)) => self.failed(&e, false, &mut backoff),
                Err(Failure::Stalled(e)) => self.failed(&e, true, &mut backoff),
            }
            self.set_stage(Stage::Retrying);
            // Jitter spreads a fleet's reconnects after a server restart.
            let pause = backoff.mul_f64(rand::rng().random_range(0.5..1.5));
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.shutdown.cancelled() => break,
            }
            backoff = (backoff * 2).min(BACKOFF_MAX.max(backoff));
        }
        self.state.lock().await.client = None;
    }

    /// Records an attempt that failed on the way (`stalled`: its LISTEN never ran).
    fn failed(&self, e: &Error, stalled: bool, backoff: &mut Duration) {
        // A failed connection says nothing about the deployment: the usual backoff, even after
        // a deaf verdict (the server may have been fixed since).
        if *backoff >= DEAF_BACKOFF {
            *backoff = BACKOFF_MIN;
        }
        tracing::warn!(target: "accord", error = %e, retry_in_ms = backoff.as_millis() as u64, "listening connection failed");
        self.failure.send_replace(Some(ListenFailure {
            why: format!(
                "the listening connection to PostgreSQL at {} failed: {e}",
                self.spec.display
            ),
            deaf: false,
            stalled,
        }));
    }

    /// Connects, LISTENs, hears its probe; then tells `Reconnected` (when `reconnect`) and hands
    /// on what the connection heard meanwhile. On a failure what it heard is dropped with it:
    /// the next connection's `Reconnected` covers the gap.
    async fn connect_and_listen(&self, reconnect: bool) -> Result<Live, Failure> {
        let sink = self.sink.clone();
        let held: Held = Arc::new(std::sync::Mutex::new(Some(Vec::new())));
        let hold = held.clone();
        let wakeup_channel = self.wakeup_channel.clone();
        let probe_channel = self.probe_channel.clone();
        let expected: Expected = Arc::default();
        let heard = expected.clone();
        self.set_stage(Stage::Connecting);
        let mut connected = self
            .spec
            .connect(move |message| {
                if let AsyncMessage::Notification(n) = message {
                    if n.channel() == probe_channel {
                        let mut expected = heard.lock().unwrap();
                        if expected.as_ref().is_some_and(|(p, _)| p == n.payload()) {
                            if let Some((_, tell)) = expected.take() {
                                let _ = tell.send(());
                            }
                        }
                        return;
                    }
                    let event = to_event(&wakeup_channel, n.channel(), n.payload());
                    let mut held = hold.lock().unwrap_or_else(|e| e.into_inner());
                    match held.as_mut() {
                        Some(queue) => queue.push(event),
                        None => sink.deliver(event),
                    }
                }
            })
            .await
            .map_err(Failure::Other)?;
        let client = Arc::new(connected.client);
        let mut state = self.state.lock().await;
        let sql: String = std::iter::once(&self.probe_channel)
            .chain(state.channels.keys())
            .map(|c| format!("LISTEN {};", quote_ident(c)))
            .collect();
        self.set_stage(Stage::Listening);
        match self.run_listen(&client, &sql).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(Failure::Other(Error::new(
                    ErrorKind::Connection,
                    format!("LISTEN failed: {e}"),
                )))
            }
            Err(_) => {
                return Err(Failure::Stalled(Error::new(
                    ErrorKind::Connection,
                    format!("LISTEN did not run within {:?}", self.command_timeout),
                )))
            }
        }
        self.set_stage(Stage::Probing);
        self.hear_probe(&expected, &client, &mut connected.ended)
            .await?;
        self.set_stage(Stage::Up);
        {
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            if reconnect {
                self.sink.deliver(BackendEvent::Reconnected);
            }
            for event in held.take().unwrap_or_default() {
                self.sink.deliver(event);
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

    /// Runs the LISTENs within the statement timeout. One still waiting after `UP_WITHIN` is
    /// logged then, not only when the statement timeout ends it: a waiter has stopped waiting
    /// for it by then (`not_up` says why to whoever waited).
    async fn run_listen(
        &self,
        client: &Client,
        sql: &str,
    ) -> Result<Result<(), tokio_postgres::Error>, tokio::time::error::Elapsed> {
        let listen = tokio::time::timeout(self.command_timeout, client.batch_execute(sql));
        tokio::pin!(listen);
        tokio::select! {
            done = &mut listen => return done,
            _ = tokio::time::sleep(UP_WITHIN) => {}
        }
        let why = format!(
            "the listening connection to PostgreSQL at {} has waited {UP_WITHIN:?} for its \
             LISTEN to run: {POOLER_HINT}",
            self.spec.display
        );
        tracing::warn!(target: "accord", error = %why, "the listening connection is not up");
        listen.await
    }

    /// Sends a NOTIFY on this listener's probe channel through the command connections and
    /// waits for the listening connection to hear it. The verdict "deaf" needs a probe that ran
    /// its course on a healthy connection: sent and committed, not heard within
    /// `PROBE_DELIVERY`, and the listening connection still answering afterwards. A connection
    /// that ends or stops answering meanwhile (a termination, a frozen network right after a
    /// restart) is a connection failure, retried with the usual backoff.
    async fn hear_probe(
        &self,
        expected: &Expected,
        client: &Client,
        ended: &mut tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), Failure> {
        let lost = |what: &str| {
            Failure::Other(Error::new(
                ErrorKind::Connection,
                format!(
                    "the listening connection {what} while it waited for its probe notification"
                ),
            ))
        };
        let payload = format!("{:016x}", rand::random::<u64>());
        let (tell, told) = tokio::sync::oneshot::channel();
        *expected.lock().unwrap() = Some((payload.clone(), tell));
        (self.probe)(self.probe_channel.clone(), payload)
            .await
            .map_err(Failure::Other)?;
        tokio::select! {
            heard = tokio::time::timeout(PROBE_DELIVERY, told) => {
                if matches!(heard, Ok(Ok(()))) {
                    return Ok(());
                }
            }
            _ = &mut *ended => return Err(lost("ended")),
        }
        // Not heard in time: deaf only if the connection is still alive. A notification is
        // delivered before the answer to a later query on the same connection, so an answer
        // here with still nothing heard means the server did not route the NOTIFY to it.
        tokio::select! {
            answer = tokio::time::timeout(PROBE_TIMEOUT, client.simple_query("")) => {
                if !matches!(answer, Ok(Ok(_))) {
                    return Err(lost("stopped answering"));
                }
            }
            _ = &mut *ended => return Err(lost("ended")),
        }
        if expected.lock().unwrap().is_none() {
            // Heard after all, in the moments before the answer.
            return Ok(());
        }
        Err(Failure::Deaf(format!(
            "the listening connection to PostgreSQL at {} hears no notifications: a NOTIFY \
             sent through the command connections did not arrive within {PROBE_DELIVERY:?}, \
             while the connection kept answering. Behind a PgBouncer in transaction mode \
             LISTEN cannot receive; set listen_url to a direct or session-pooled URL of the \
             same database",
            self.spec.display
        )))
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

/// The last reason no listening connection is up, as `listen` reports it.
#[derive(Clone)]
struct ListenFailure {
    why: String,
    /// The connection worked but does not hear: a deployment problem, not a blip.
    deaf: bool,
    /// Its LISTEN never ran (see `POOLER_HINT`).
    stalled: bool,
}

/// Why a connection attempt did not give a listening connection.
enum Failure {
    /// It connected and LISTENed, but does not hear: a deployment problem, said once clearly.
    Deaf(String),
    /// It failed on the way: retried with backoff.
    Other(Error),
    /// Its LISTEN did not run within the statement timeout: retried as `Other`, and said with
    /// `POOLER_HINT`.
    Stalled(Error),
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
