//! Durable streams: what NOTIFY cannot promise. [`crate::Client::publish`] appends an event to a
//! stream's table and gets its seq (1, 2, 3, … per stream, in commit order, no gaps); a
//! [`StreamSubscription`] reads the table after the last seq it delivered, in pages, and
//! sleeps until a notification on the stream's channel says "read again". A notification that
//! a reconnect lost costs nothing: the next read starts from the last delivered seq, so events
//! are delivered once each, in order, across reconnects of either connection.
//!
//! A named consumer stores its position with [`StreamSubscription::ack`]; a subscription of the
//! same consumer starts after it. Retention by length and by age deletes the oldest events; a
//! reader asking for deleted ones gets `Trimmed`, naming where the stream starts now.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::Stream;
use tokio_util::sync::CancellationToken;

use crate::backend::{StreamPage, StreamState};
use crate::error::{Error, ErrorKind, Result, WayOut};
use crate::naming::channel_for;
use crate::session::{self, Event, Outgoing, Publisher, Session};
use crate::subscription::Subscription;
use crate::validate;
use crate::wording::Why;

/// Events read at once unless the subscriber says otherwise.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// After a failed read, wait this long before the next, doubling up to [`READ_BACKOFF_MAX`].
const READ_BACKOFF_MIN: Duration = Duration::from_millis(50);
const READ_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// The channel on which publishes to `stream` wake its subscribers.
pub(crate) fn stream_channel(namespace: &str, stream: &str) -> String {
    channel_for("accord_stream", namespace, &[stream])
}

/// Where a new subscription starts: after this seq, and whether a gap before the first event
/// read is expected (`Earliest`: the oldest stored event, whatever retention deleted before it).
///
/// A named consumer's stored position wins over `Earliest` and `Latest`, which say where to go
/// when there is none. A stored position that retention trimmed past cannot be used: `Earliest`
/// then goes on from the oldest stored event (the trimmed ones are gone; nothing that still
/// exists is skipped), while `Latest`, which is every binding's default and would skip stored
/// events the consumer never read, is `Trimmed` with the way out. An explicit `After(seq)` is a
/// seek and wins over everything; a seek to a trimmed seq is `Trimmed`, and one past the last
/// seq published is refused (`InvalidArgument` naming "after"): no such event ever existed, so
/// the seq is a mistake (another stream's, a stored position from another database), and
/// waiting for the stream to grow up to it would deliver nothing, silently, for as long.
fn start_after(
    stream: &str,
    start: Option<StreamStart>,
    stored: Option<i64>,
    state: &StreamState,
) -> Result<(i64, bool)> {
    let trimmed = |after: i64| after < state.last_seq && after + 1 < state.first_seq;
    let gone = |after: i64, way_out: WayOut| {
        Error::trimmed(stream, after, state.first_seq).way_out(way_out)
    };
    match (start, stored) {
        (Some(StreamStart::After(seq)), _) if seq > state.last_seq => Err(Error::invalid(
            "after",
            format!(
                "seq {seq} is past the end of stream {stream:?}, whose last seq is {}: seek to \
                 a seq it holds, or start at \"latest\" to wait for the events published from now on",
                state.last_seq
            ),
        )),
        (Some(StreamStart::After(seq)), _) if trimmed(seq) => Err(gone(seq, WayOut::Seek)),
        (Some(StreamStart::After(seq)), _) => Ok((seq, false)),
        (_, Some(acked)) if !trimmed(acked) => Ok((acked, false)),
        (Some(StreamStart::Earliest), _) => Ok((state.first_seq - 1, true)),
        (Some(StreamStart::Latest) | None, Some(acked)) => {
            Err(gone(acked, WayOut::StartEarliest))
        }
        (Some(StreamStart::Latest) | None, None) => Ok((state.last_seq, false)),
    }
}

/// One event of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEvent {
    /// The stream it was published to.
    pub stream: String,
    /// Its place in the stream: 1 for the first event, one more for each after it.
    pub seq: i64,
    /// What the publisher sent (any UTF-8, up to 64 KiB).
    pub payload: String,
    /// The coordinator's clock when it was stored; never earlier than the event before it.
    pub published_at: DateTime<Utc>,
}

/// Where a subscription starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamStart {
    /// With the oldest event the stream still holds.
    Earliest,
    /// With the next event published (nothing already stored).
    Latest,
    /// With the event after this seq (0: the first event ever; at most the stream's last seq,
    /// else `InvalidArgument`). Also a named consumer's explicit seek: it wins over the
    /// consumer's stored position.
    After(i64),
}

impl StreamStart {
    /// `"earliest"`, `"latest"`, or a seq (0 or more) in decimal, as the bindings and the CLI
    /// take it; an `InvalidArgument` error naming `field` otherwise.
    pub fn parse(field: &str, text: &str) -> Result<StreamStart> {
        match text {
            "earliest" => Ok(StreamStart::Earliest),
            "latest" => Ok(StreamStart::Latest),
            other => match other.parse::<i64>() {
                Ok(seq) => StreamStart::after(field, seq),
                Err(_) => Err(Error::invalid(
                    field,
                    format!("{other:?} is not \"earliest\", \"latest\" or a seq"),
                )),
            },
        }
    }

    /// `After(seq)` for a binding's integer: `InvalidArgument` naming `field` when negative.
    pub fn after(field: &str, seq: i64) -> Result<StreamStart> {
        validate::seq(field, seq)?;
        Ok(StreamStart::After(seq))
    }
}

/// Options of [`crate::Client::subscribe`].
#[derive(Clone, Debug)]
pub struct SubscribeOptions {
    pub(crate) start: Option<StreamStart>,
    pub(crate) consumer: Option<String>,
    pub(crate) page_size: usize,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions {
            start: None,
            consumer: None,
            page_size: DEFAULT_PAGE_SIZE,
        }
    }
}

impl SubscribeOptions {
    /// From the next event published, or a named consumer's stored position.
    pub fn new() -> Self {
        Self::default()
    }
    /// Where to start. `Earliest` and `Latest` apply when the consumer has no stored position
    /// (or there is no consumer); `After(seq)` always applies.
    pub fn start(mut self, start: StreamStart) -> Self {
        self.start = Some(start);
        self
    }
    /// A named consumer: [`StreamSubscription::ack`] stores its position in the stream, and a
    /// later subscription of the same name (in any process and language) resumes after it.
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }
    /// Events read per statement (1..=1,000; 100 by default).
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n;
        self
    }
}

/// How long a stream keeps its events. Both bounds may be set; an event goes when either says
/// so. Trimming runs in the background of the publishing clients (about once a second per
/// stream) and when the rule is set; it never blocks a publisher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamRetention {
    /// Keep at most this many of the newest events.
    pub max_len: Option<u64>,
    /// Keep events at most this old.
    pub max_age: Option<Duration>,
}

impl StreamRetention {
    /// No bound: every event is kept.
    pub fn new() -> Self {
        Self::default()
    }
    /// Keep at most `n` of the newest events (n ≥ 1).
    pub fn max_len(mut self, n: u64) -> Self {
        self.max_len = Some(n);
        self
    }
    /// Keep events for at most `age` (≥ 100 ms).
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }
}

/// A stream's bounds and retention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    /// The stream's name.
    pub stream: String,
    /// The oldest seq still stored; `last_seq + 1` when none is.
    pub first_seq: i64,
    /// The newest seq published (0: nothing ever was).
    pub last_seq: i64,
    /// Its retention rule.
    pub retention: StreamRetention,
}

/// Checks a stream name and a payload, and builds what the publisher sends.
fn outgoing(namespace: &str, stream: &str, payload: String) -> Result<Outgoing> {
    validate::event_payload(&payload)?;
    Ok(Outgoing {
        stream: stream.to_string(),
        payload,
        channel: stream_channel(namespace, stream),
    })
}

pub(crate) async fn publish(session: &Arc<Session>, stream: &str, payload: &str) -> Result<i64> {
    validate::name("stream", stream)?;
    let event = outgoing(&session.scope.namespace, stream, payload.to_string())?;
    session.check_usable()?;
    let published = Publisher::publish(&session.scope, vec![event]).await?;
    Ok(published[0].0)
}

pub(crate) async fn publish_many(
    session: &Arc<Session>,
    stream: &str,
    payloads: Vec<String>,
) -> Result<Vec<i64>> {
    validate::name("stream", stream)?;
    validate::publish_events(payloads.len())?;
    let events = payloads
        .into_iter()
        .map(|p| outgoing(&session.scope.namespace, stream, p))
        .collect::<Result<Vec<_>>>()?;
    session.check_usable()?;
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let published = Publisher::publish(&session.scope, events).await?;
    Ok(published.into_iter().map(|(seq, _)| seq).collect())
}

fn info(stream: &str, state: StreamState) -> StreamInfo {
    StreamInfo {
        stream: stream.to_string(),
        first_seq: state.first_seq,
        last_seq: state.last_seq,
        retention: StreamRetention {
            max_len: state.max_len.map(|n| n.max(0) as u64),
            max_age: state.max_age,
        },
    }
}

pub(crate) async fn stream_info(session: &Arc<Session>, stream: &str) -> Result<StreamInfo> {
    validate::name("stream", stream)?;
    session.check_usable()?;
    let state = session
        .scope
        .backend
        .stream_state(&session.scope.namespace, stream)
        .await?;
    Ok(info(stream, state))
}

pub(crate) async fn set_retention(
    session: &Arc<Session>,
    stream: &str,
    retention: StreamRetention,
) -> Result<u64> {
    validate::name("stream", stream)?;
    let max_len = match retention.max_len {
        None => None,
        Some(n) => match i64::try_from(n) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return Err(Error::invalid(
                    "max_len",
                    format!("{n} is outside 1..=2^63-1"),
                ))
            }
        },
    };
    if let Some(age) = retention.max_age {
        if age < validate::MIN_TTL {
            return Err(Error::invalid(
                "max_age",
                Why::new()
                    .duration(age)
                    .text(" is shorter than the least, ")
                    .duration(validate::MIN_TTL),
            ));
        }
    }
    session.check_usable()?;
    let scope = &session.scope;
    scope
        .backend
        .set_retention(&scope.namespace, stream, max_len, retention.max_age)
        .await?;
    session::trim_stream(scope, stream).await
}

/// Where the next read starts, and what it may find.
struct Reading {
    /// The last seq read from the table (delivered, or waiting in `buffer`).
    after: i64,
    buffer: VecDeque<StreamEvent>,
    /// From `Earliest`, until the first read: a gap before the first event is the stream's
    /// start, not a loss.
    gap_is_start: bool,
}

/// The events of one stream, stored ones first, then live, in seq order, each once. Read with
/// [`StreamSubscription::next`] (or [`StreamSubscription::events`]). Closing it (or dropping
/// it) stops the reads and the listening.
pub struct StreamSubscription {
    session: Arc<Session>,
    stream: String,
    consumer: Option<String>,
    page_size: usize,
    wakeups: Subscription,
    reading: tokio::sync::Mutex<Reading>,
    /// The last seq handed to the caller (what `ack` may store).
    delivered: AtomicI64,
    closed: CancellationToken,
}

impl fmt::Debug for StreamSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamSubscription")
            .field("stream", &self.stream)
            .field("consumer", &self.consumer)
            .field("position", &self.position())
            .finish_non_exhaustive()
    }
}

impl StreamSubscription {
    pub(crate) async fn open(
        session: &Arc<Session>,
        stream: &str,
        options: SubscribeOptions,
    ) -> Result<StreamSubscription> {
        validate::name("stream", stream)?;
        if let Some(consumer) = &options.consumer {
            validate::name("consumer", consumer)?;
        }
        let page_size = validate::page_size(validate::usize_count(options.page_size))?;
        if let Some(StreamStart::After(seq)) = options.start {
            validate::seq("after", seq)?;
        }
        session.check_usable()?;
        let scope = &session.scope;
        // Listening first: an event published from now on wakes this subscription, so the
        // position read below misses nothing.
        let wakeups =
            Subscription::open(session, vec![stream_channel(&scope.namespace, stream)]).await?;
        let state = scope.backend.stream_state(&scope.namespace, stream).await?;
        let stored = match &options.consumer {
            Some(consumer) => {
                scope
                    .backend
                    .acked(&scope.namespace, stream, consumer)
                    .await?
            }
            None => None,
        };
        let (after, gap_is_start) = start_after(stream, options.start, stored, &state)?;
        Ok(StreamSubscription {
            session: session.clone(),
            stream: stream.to_string(),
            consumer: options.consumer,
            page_size,
            wakeups,
            reading: tokio::sync::Mutex::new(Reading {
                after,
                buffer: VecDeque::new(),
                gap_is_start,
            }),
            delivered: AtomicI64::new(after),
            closed: CancellationToken::new(),
        })
    }

    /// The stream this subscription reads.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The named consumer, if any.
    pub fn consumer(&self) -> Option<&str> {
        self.consumer.as_deref()
    }

    /// The seq of the last event delivered (before the first: where the subscription started).
    pub fn position(&self) -> i64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// The next event, waiting for one to be published. `Ok(None)` once this subscription is
    /// closed; `Err(Closed)` once the client is; `Err(Trimmed)` when retention deleted events
    /// this subscription had not read yet (it then ends, closed). A read that fails on the connection
    /// is repeated (backing off) until it succeeds: no event is skipped. Cancel-safe.
    pub async fn next(&self) -> Result<Option<StreamEvent>> {
        self.session.check_fork()?;
        let mut reading = tokio::select! {
            r = self.reading.lock() => r,
            _ = self.closed.cancelled() => return Ok(None),
        };
        let mut backoff = READ_BACKOFF_MIN;
        loop {
            if self.closed.is_cancelled() {
                return Ok(None);
            }
            if let Some(event) = reading.buffer.pop_front() {
                self.delivered.store(event.seq, Ordering::Relaxed);
                return Ok(Some(event));
            }
            self.session.check_usable()?;
            // Every wake-up so far is answered by the read below.
            self.wakeups.discard_pending();
            let read = tokio::select! {
                r = self.read(reading.after) => r,
                _ = self.closed.cancelled() => return Ok(None),
            };
            let page = match read {
                Ok(page) => page,
                Err(e) if e.kind() == ErrorKind::Connection && !self.session.is_closed() => {
                    tracing::debug!(target: "accord", stream = %self.stream, error = %e, "reading the stream failed; trying again");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = self.closed.cancelled() => return Ok(None),
                        _ = self.session.closed.cancelled() => return Err(Error::closed()),
                    }
                    backoff = (backoff * 2).min(READ_BACKOFF_MAX);
                    continue;
                }
                Err(e) => return Err(e),
            };
            backoff = READ_BACKOFF_MIN;
            let expected = reading.after + 1;
            let first = page.events.first().map_or(page.last_seq + 1, |e| e.seq);
            if page.last_seq >= expected && first > expected && !reading.gap_is_start {
                // Nothing more is delivered: the subscription is closed (the next call says so).
                self.closed.cancel();
                return Err(Error::trimmed(&self.stream, reading.after, first)
                    .way_out(WayOut::Resubscribe(self.consumer.is_some())));
            }
            reading.gap_is_start = false;
            if let Some(last) = page.events.last() {
                reading.after = last.seq;
                let stream = &self.stream;
                reading
                    .buffer
                    .extend(page.events.into_iter().map(|e| StreamEvent {
                        stream: stream.clone(),
                        seq: e.seq,
                        payload: e.payload,
                        published_at: e.published_at,
                    }));
                continue;
            }
            // Caught up: sleep until a publish (or a reconnect of the listening connection,
            // which may have lost one) says to read again.
            tokio::select! {
                event = self.wakeups.recv() => match event? {
                    Some(Event::Message(_)) | Some(Event::Reconnected) => {}
                    None => return Ok(None),
                },
                _ = self.closed.cancelled() => return Ok(None),
            }
        }
    }

    async fn read(&self, after: i64) -> Result<StreamPage> {
        let scope = &self.session.scope;
        scope
            .backend
            .read_stream(&scope.namespace, &self.stream, after, self.page_size)
            .await
    }

    /// The events as a stream, ending when the subscription closes, or after its first error.
    pub fn events(&self) -> impl Stream<Item = Result<StreamEvent>> + '_ {
        futures_util::stream::unfold((self, false), |(sub, ended)| async move {
            if ended {
                return None;
            }
            match sub.next().await {
                Ok(Some(event)) => Some((Ok(event), (sub, false))),
                Ok(None) => None,
                Err(e) => Some((Err(e), (sub, true))),
            }
        })
    }

    /// Stores the named consumer's position: a later subscription of the consumer starts after
    /// `seq`. Positions only move forward (acking an older seq changes nothing). `seq` must have
    /// been delivered by this subscription; it may be acked after the subscription closed (the
    /// work on the last event often ends after the reading did).
    pub async fn ack(&self, seq: i64) -> Result<()> {
        let Some(consumer) = &self.consumer else {
            return Err(Error::invalid(
                "consumer",
                "ack needs a named consumer: subscribe with a consumer name",
            ));
        };
        let delivered = self.position();
        if seq < 1 || seq > delivered {
            return Err(Error::invalid(
                "seq",
                format!(
                    "{seq} was not delivered by this subscription (last delivered: {delivered})"
                ),
            ));
        }
        self.session.check_usable()?;
        let scope = &self.session.scope;
        scope
            .backend
            .ack(&scope.namespace, &self.stream, consumer, seq)
            .await
    }

    /// Stops reading now (a waiting `next` returns `Ok(None)`) and stops listening.
    pub async fn close(&self) {
        self.closed.cancel();
        self.wakeups.close().await;
    }

    /// True once closed (by [`StreamSubscription::close`] or by closing the client).
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.session.is_closed()
    }
}
