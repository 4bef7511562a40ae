//! Durable streams: `client.publish`, `publishMany`, `subscribe`, `streamInfo`,
//! `setStreamRetention`, and `StreamSubscription`, an async iterator of `StreamEvent`s. The
//! rules (seqs, positions, acks, retention, limits) are the core's (`accord::StreamSubscription`);
//! this file reads the arguments, converts seqs to bigints, and maps the subscription onto an
//! async iterator that an `AbortSignal` or `close()` ends.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

use crate::client::AbortWatch;
use crate::convert::{
    opt_integer, opt_millis, opt_options, opt_string, property, seq, settle_ok, string,
};
use crate::error::{Failure, Outcome};
use crate::subscription::Step;

/// Options of `client.subscribe()`.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct SubscribeOptions {
    /// Where to start: `'latest'` (the next event published; the default), `'earliest'` (the
    /// oldest event the stream still holds), or a seq: the events after it (`0`: from the first
    /// event ever). `'latest'` and `'earliest'` apply only when the consumer has no stored
    /// position; a seq always applies (a seek). Rejects with `ACCORD_TRIMMED` when the events
    /// after that seq were deleted by the stream's retention.
    #[napi(ts_type = "'latest' | 'earliest' | bigint | number")]
    pub after: Option<()>,
    /// A named consumer: `ack(seq)` stores its position, and a later subscription of the same
    /// name (in any process and language) resumes after it.
    pub consumer: Option<String>,
    /// Events read per statement (default 100; 1 ..= 1000).
    pub page_size: Option<u32>,
    /// Aborting it closes the subscription: a pending `next()` resolves with `done: true`.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<()>,
}

/// Options of `client.setStreamRetention()`: both may be set, and an event goes when either
/// says so; none keeps every event.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct StreamRetention {
    /// Keep at most this many of the newest events (at least 1).
    pub max_len: Option<f64>,
    /// Keep events at most this many milliseconds (at least 100).
    pub max_age: Option<f64>,
}

/// One event of a stream.
#[napi(object, object_from_js = false)]
pub struct StreamEvent {
    /// The stream it was published to.
    pub stream: String,
    /// Its place in the stream: 1 for the first event, one more for each after it.
    pub seq: BigInt,
    /// What the publisher sent (any string, NUL included, up to 64 KiB of UTF-8).
    pub payload: String,
    /// When it was stored, by the coordinator's clock; never earlier than the event before it.
    pub published_at: chrono::DateTime<chrono::Utc>,
}

impl From<accord::StreamEvent> for StreamEvent {
    fn from(event: accord::StreamEvent) -> Self {
        StreamEvent {
            stream: event.stream,
            seq: BigInt::from(event.seq),
            payload: event.payload,
            published_at: event.published_at,
        }
    }
}

/// A stream's bounds and retention (`client.streamInfo()`).
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct StreamInfo {
    /// The stream's name.
    pub stream: String,
    /// The oldest seq still stored; `lastSeq + 1` when none is.
    pub first_seq: BigInt,
    /// The newest seq published (`0`: nothing ever was).
    pub last_seq: BigInt,
    /// The retention's bound on the number of events, `null` for none.
    pub max_len: Option<f64>,
    /// The retention's bound on the age of events in milliseconds, `null` for none.
    pub max_age: Option<f64>,
}

impl From<accord::StreamInfo> for StreamInfo {
    fn from(info: accord::StreamInfo) -> Self {
        StreamInfo {
            stream: info.stream,
            first_seq: BigInt::from(info.first_seq),
            last_seq: BigInt::from(info.last_seq),
            max_len: info.retention.max_len.map(|n| n as f64),
            max_age: info.retention.max_age.map(crate::convert::millis),
        }
    }
}

/// The arguments of `client.subscribe()`, and the watch of its signal (with the token the
/// signal cancels).
pub(crate) struct Subscribe {
    pub stream: String,
    pub options: accord::SubscribeOptions,
    pub abort: Option<(AbortWatch, CancellationToken)>,
}

pub(crate) fn parse_subscribe(
    env: &Env,
    stream: &Unknown,
    options: Option<Unknown>,
) -> Outcome<Subscribe> {
    let stream = string("stream", stream)?;
    let mut parsed = accord::SubscribeOptions::new();
    let mut abort = None;
    if let Some(o) = opt_options(
        "options",
        options,
        &["after", "consumer", "pageSize", "signal"],
    )? {
        if let Some(start) = start("options.after", &property(&o, "after")?)? {
            parsed = parsed.start(start);
        }
        if let Some(consumer) = opt_string("options.consumer", &property(&o, "consumer")?)? {
            parsed = parsed.consumer(consumer);
        }
        if let Some(n) = opt_integer("options.pageSize", &property(&o, "pageSize")?)? {
            parsed = parsed.page_size(accord::limits::page_size(n)?);
        }
        abort = AbortWatch::from_options(env, &format!("subscription to {stream:?}"), &o)?;
    }
    Ok(Subscribe {
        stream,
        options: parsed,
        abort,
    })
}

/// `options.after`: `'latest'`, `'earliest'` or a seq (a bigint or a number).
fn start(field: &str, value: &Unknown) -> Outcome<Option<accord::StreamStart>> {
    match value.get_type()? {
        ValueType::Undefined | ValueType::Null => Ok(None),
        ValueType::String => Ok(Some(accord::StreamStart::parse(
            field,
            &string(field, value)?,
        )?)),
        ValueType::BigInt | ValueType::Number => {
            Ok(Some(accord::StreamStart::after(field, seq(field, value)?)?))
        }
        other => Err(Failure::wrong_type(
            field,
            "'latest', 'earliest', a bigint or a number",
            other,
        )),
    }
}

pub(crate) fn parse_retention(
    stream: &Unknown,
    retention: Option<Unknown>,
) -> Outcome<(String, accord::StreamRetention)> {
    let stream = string("stream", stream)?;
    // Required: `{}` keeps every event, a forgotten argument must not say so.
    let given = match &retention {
        Some(r) => r.get_type()?,
        None => ValueType::Undefined,
    };
    let Some(o) = opt_options("retention", retention, &["maxLen", "maxAge"])? else {
        return Err(Failure::wrong_type("retention", "an object", given));
    };
    let mut parsed = accord::StreamRetention::new();
    if let Some(n) = opt_integer("retention.maxLen", &property(&o, "maxLen")?)? {
        parsed = parsed.max_len(accord::limits::stream_max_len(n)?);
    }
    if let Some(age) = opt_millis("retention.maxAge", &property(&o, "maxAge")?, false)? {
        parsed = parsed.max_age(age);
    }
    Ok((stream, parsed))
}

/// The events of one stream, stored ones first, then live, in seq order, each once, across
/// reconnects: `for await (const event of subscription)` yields `StreamEvent`s. Opened by
/// `client.subscribe()`.
///
/// The subscription reads the stream when asked for its next event, so it keeps the Node
/// process alive only while a `next()` is pending. `close()` it (or leave the `for await` loop,
/// or dispose it, or abort its `signal`) when done.
#[napi(custom_finalize)]
pub struct StreamSubscription {
    inner: Arc<accord::StreamSubscription>,
    /// The watch of `options.signal`, removed on close.
    watch: Option<AbortWatch>,
    /// Cancelled on close or collection: ends the task that closes the subscription when the
    /// signal aborts.
    ended: CancellationToken,
}

impl StreamSubscription {
    /// Wraps an open subscription; an abort of its signal (`abort`) closes it. Runs on the
    /// JavaScript thread.
    pub(crate) fn adopt(
        inner: accord::StreamSubscription,
        abort: Option<(AbortWatch, CancellationToken)>,
    ) -> StreamSubscription {
        let inner = Arc::new(inner);
        let ended = CancellationToken::new();
        let watch = abort.map(|(watch, aborted)| {
            let inner = inner.clone();
            let ended = ended.clone();
            napi::bindgen_prelude::spawn(async move {
                tokio::select! {
                    _ = aborted.cancelled() => inner.close().await,
                    _ = ended.cancelled() => {}
                }
            });
            watch
        });
        StreamSubscription {
            inner,
            watch,
            ended,
        }
    }

    /// Stops the watch of the signal and closes the core's subscription.
    fn shut<'e>(&mut self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        if let Some(watch) = self.watch.take() {
            watch.stop(env);
        }
        self.ended.cancel();
        let inner = self.inner.clone();
        settle_ok(env, async move {
            inner.close().await;
            Ok(())
        })
    }
}

impl ObjectFinalize for StreamSubscription {
    fn finalize(mut self, env: Env) -> Result<()> {
        // No JavaScript runs in a finalizer: the listener stays on the signal (it only
        // cancels a token), the references are let go.
        if let Some(watch) = self.watch.take() {
            watch.forget(&env);
        }
        // Dropping the core's subscription stops its listening in the background.
        self.ended.cancel();
        Ok(())
    }
}

#[napi]
impl StreamSubscription {
    /// The stream this subscription reads.
    #[napi(getter)]
    pub fn stream(&self) -> String {
        self.inner.stream().to_string()
    }

    /// The named consumer, or `null`.
    #[napi(getter)]
    pub fn consumer(&self) -> Option<String> {
        self.inner.consumer().map(str::to_string)
    }

    /// The seq of the last event delivered (before the first: where the subscription started).
    #[napi(getter)]
    pub fn position(&self) -> BigInt {
        BigInt::from(self.inner.position())
    }

    /// True once closed (by `close()`, its signal, or closing the client).
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The next event: `{ done: false, value }`, waiting for one to be published, or
    /// `{ done: true }` once the subscription is closed. Rejects with `ACCORD_CLOSED` once the
    /// client is closed, and with `ACCORD_TRIMMED` when the stream's retention deleted events
    /// this subscription had not read yet (it then ends).
    #[napi(ts_return_type = "Promise<IteratorResult<StreamEvent, undefined>>")]
    pub fn next<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Step<StreamEvent>>> {
        let inner = self.inner.clone();
        settle_ok(env, async move {
            Ok(match inner.next().await? {
                Some(event) => Step::of(StreamEvent::from(event)),
                None => Step::end(),
            })
        })
    }

    /// Stores the named consumer's position: a later subscription of the consumer starts after
    /// `seq`, which must have been delivered by this subscription. Positions only move forward.
    /// Rejects with `ACCORD_INVALID_ARGUMENT` without a consumer.
    #[napi(
        ts_args_type = "seq: bigint | number",
        ts_return_type = "Promise<void>"
    )]
    pub fn ack<'e>(&self, env: &'e Env, seq: Unknown) -> Result<PromiseRaw<'e, ()>> {
        let seq = crate::convert::seq("seq", &seq);
        let inner = self.inner.clone();
        settle_ok(env, async move { Ok(inner.ack(seq?).await?) })
    }

    /// Closes the subscription (what leaving a `for await` loop calls).
    #[napi(
        js_name = "return",
        ts_return_type = "Promise<IteratorReturnResult<undefined>>"
    )]
    pub fn return_<'e>(&mut self, env: &'e Env) -> Result<PromiseRaw<'e, Step<StreamEvent>>> {
        if let Some(watch) = self.watch.take() {
            watch.stop(env);
        }
        self.ended.cancel();
        let inner = self.inner.clone();
        settle_ok(env, async move {
            inner.close().await;
            Ok(Step::end())
        })
    }

    /// Stops reading and listening: a pending `next()` resolves with `done: true`. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'e>(&mut self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.shut(env)
    }

    #[napi(well_known_symbol = "asyncIterator", ts_return_type = "this")]
    pub fn iterator<'e>(&self, this: This<'e>) -> This<'e> {
        this
    }

    /// `await using subscription = await client.subscribe(stream)` closes it at the end of the
    /// block.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&mut self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.shut(env)
    }
}
