//! Durable streams: publish (one payload or many), subscribe with options, a subscription read
//! pull-style like an observer (timeout, cancel token), acks of a named consumer, a stream's
//! bounds and its retention. Payloads are pointer + length: any UTF-8, NUL included.

use std::ffi::{c_char, CString};
use std::time::Duration;

use accord_core::{
    Error, ErrorKind, StreamEvent, StreamRetention, StreamStart, StreamSubscription,
    SubscribeOptions,
};

use crate::client::accord_client;
use crate::error::{accord_error, accord_status, invalid, run, run_or};
use crate::ffi::{c_string, free_box, handle, out, text};
use crate::membership::cancelled;
use crate::options::accord_cancel_token;
use crate::runtime::{block_on, elapse};

/// A payload given as pointer + length: UTF-8 (NUL allowed). NULL with length 0 is "".
fn payload<'a>(field: &str, ptr: *const c_char, len: usize) -> Result<&'a str, Error> {
    if ptr.is_null() {
        return if len == 0 {
            Ok("")
        } else {
            Err(invalid(field, "must not be NULL"))
        };
    }
    // SAFETY: a non-NULL payload points to `len` readable bytes for the call, by contract.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    std::str::from_utf8(bytes).map_err(|_| invalid(field, "is not valid UTF-8"))
}

/// Appends `payload[0..payload_len]` (any UTF-8, NUL included, up to 64 KiB; NULL with length 0
/// is "") to `stream`. On success `*out_seq` (may be NULL) is its seq: 1 for the stream's first
/// event, one more for each after it, in commit order. ACCORD_CONNECTION: the event may or may
/// not be stored (it is not retried, which could store it twice). Blocks for one round trip
/// (concurrent publishes of one client share statements).
#[no_mangle]
pub extern "C" fn accord_client_publish(
    client: *const accord_client,
    stream: *const c_char,
    payload: *const c_char,
    payload_len: usize,
    out_seq: *mut i64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let stream = text("stream", stream)?;
        let payload = self::payload("payload", payload, payload_len)?;
        let seq = block_on(c.client.publish(stream, payload))?;
        // SAFETY: NULL or writable, by contract.
        if let Some(out) = unsafe { out_seq.as_mut() } {
            *out = seq;
        }
        Ok(())
    })
}

/// Appends `count` payloads (at most 10,000) to `stream`, in this order: `payloads[i]` holds
/// `lens[i]` bytes of UTF-8 (NUL allowed), or, when `lens` is NULL, is NUL-terminated. On
/// success `out_seqs[0..count]` (may be NULL) are their seqs, increasing. Nothing is stored when
/// a payload is refused. Blocks.
#[no_mangle]
pub extern "C" fn accord_client_publish_many(
    client: *const accord_client,
    stream: *const c_char,
    payloads: *const *const c_char,
    lens: *const usize,
    count: usize,
    out_seqs: *mut i64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let stream = text("stream", stream)?;
        if payloads.is_null() && count > 0 {
            return Err(invalid("payloads", "must not be NULL"));
        }
        // The count first: nothing is copied for a call the core would refuse.
        accord_core::limits::publish_events(count)?;
        let items: Vec<String> = (0..count)
            .map(|i| {
                let field = format!("payloads[{i}]");
                // SAFETY: `payloads` (and `lens`, unless NULL) hold `count` entries, by contract.
                let ptr = unsafe { *payloads.add(i) };
                if lens.is_null() {
                    text(&field, ptr).map(str::to_string)
                } else {
                    // SAFETY: as above.
                    payload(&field, ptr, unsafe { *lens.add(i) }).map(str::to_string)
                }
            })
            .collect::<Result<_, _>>()?;
        let seqs = block_on(c.client.publish_many(stream, items))?;
        if !out_seqs.is_null() {
            // SAFETY: a non-NULL `out_seqs` has room for `count` seqs, by contract; the core
            // returns one per payload.
            let out = unsafe { std::slice::from_raw_parts_mut(out_seqs, count) };
            for (slot, seq) in out.iter_mut().zip(seqs) {
                *slot = seq;
            }
        }
        Ok(())
    })
}

/// Options of accord_client_subscribe(). Defaults: start with the next event published (or
/// after the named consumer's stored position), no consumer, 100 events per read.
#[derive(Default)]
pub struct accord_subscribe_options {
    start: Option<StreamStart>,
    consumer: Option<String>,
    page_size: Option<i64>,
}

/// New subscribe options with every default. Free with accord_subscribe_options_free().
#[no_mangle]
pub extern "C" fn accord_subscribe_options_new() -> *mut accord_subscribe_options {
    Box::into_raw(Box::default())
}

/// Frees subscribe options. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_subscribe_options_free(options: *mut accord_subscribe_options) {
    run_or((), || free_box(options))
}

fn set(
    options: *mut accord_subscribe_options,
    err: *mut *mut accord_error,
    change: impl FnOnce(&mut accord_subscribe_options) -> Result<(), Error>,
) -> accord_status {
    run(err, || {
        // SAFETY: a non-NULL options pointer was created by accord and not freed, by contract.
        let options =
            unsafe { options.as_mut() }.ok_or_else(|| invalid("options", "must not be NULL"))?;
        change(options)
    })
}

/// Start with the oldest event the stream still holds (when the consumer, if any, has no
/// stored position).
#[no_mangle]
pub extern "C" fn accord_subscribe_options_set_start_earliest(
    options: *mut accord_subscribe_options,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.start = Some(StreamStart::Earliest);
        Ok(())
    })
}

/// Start with the next event published (when the consumer, if any, has no stored position):
/// the default.
#[no_mangle]
pub extern "C" fn accord_subscribe_options_set_start_latest(
    options: *mut accord_subscribe_options,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.start = Some(StreamStart::Latest);
        Ok(())
    })
}

/// Start with the event after `seq` (0: the first event ever), whatever the consumer's stored
/// position (a seek). A negative seq is refused by accord_client_subscribe() (naming "after").
#[no_mangle]
pub extern "C" fn accord_subscribe_options_set_start_after(
    options: *mut accord_subscribe_options,
    seq: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.start = Some(StreamStart::After(seq));
        Ok(())
    })
}

/// A named consumer: accord_stream_subscription_ack() stores its position, and a later
/// subscription of the same name (in any process and language) resumes after it. Checked by
/// accord_client_subscribe() (naming "consumer").
#[no_mangle]
pub extern "C" fn accord_subscribe_options_set_consumer(
    options: *mut accord_subscribe_options,
    consumer: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.consumer = Some(text("consumer", consumer)?.to_string());
        Ok(())
    })
}

/// Events read per statement (1 ..= 1000, checked by accord_client_subscribe(), naming
/// "page_size"; 100 by default).
#[no_mangle]
pub extern "C" fn accord_subscribe_options_set_page_size(
    options: *mut accord_subscribe_options,
    page_size: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.page_size = Some(page_size);
        Ok(())
    })
}

impl accord_subscribe_options {
    /// The core's options; the page size is judged by the core (`InvalidArgument` naming
    /// `page_size`).
    fn to_core(&self) -> Result<SubscribeOptions, Error> {
        let mut o = SubscribeOptions::new();
        if let Some(start) = self.start {
            o = o.start(start);
        }
        if let Some(consumer) = &self.consumer {
            o = o.consumer(consumer.clone());
        }
        if let Some(n) = self.page_size {
            o = o.page_size(accord_core::limits::page_size(n)?);
        }
        Ok(o)
    }
}

/// The events of one stream, stored ones first, then live, in seq order, each once. Read with
/// accord_stream_subscription_next(), which may block in one thread while
/// accord_stream_subscription_close() is called from another; free only after every call on it
/// has returned.
pub struct accord_stream_subscription {
    subscription: StreamSubscription,
    stream: CString,
    consumer: Option<CString>,
}

/// Subscribes to `stream`. `options` (NULL: every default) say where to start and name a
/// consumer. Returns once every event published from then on will be delivered. ACCORD_TRIMMED
/// when the start asked for was deleted by the stream's retention (the message names the seq the
/// stream starts at now). On success `*out_subscription` is a subscription to read with
/// accord_stream_subscription_next() and free with accord_stream_subscription_free(). Blocks.
#[no_mangle]
pub extern "C" fn accord_client_subscribe(
    client: *const accord_client,
    stream: *const c_char,
    options: *const accord_subscribe_options,
    out_subscription: *mut *mut accord_stream_subscription,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let stream = text("stream", stream)?;
        let out_sub = out("out_subscription", out_subscription)?;
        *out_sub = std::ptr::null_mut();
        // SAFETY: NULL or live options, by contract.
        let options = match unsafe { options.as_ref() } {
            Some(o) => o.to_core()?,
            None => SubscribeOptions::new(),
        };
        let subscription = block_on(c.client.subscribe(stream, options))?;
        *out_sub = Box::into_raw(Box::new(accord_stream_subscription {
            stream: c_string(subscription.stream()),
            consumer: subscription.consumer().map(c_string),
            subscription,
        }));
        Ok(())
    })
}

/// One event of a stream. Free with accord_stream_event_free().
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct accord_stream_event {
    /// The stream it was published to, NUL-terminated; owned by the event.
    pub stream: *const c_char,
    /// Its place in the stream: 1 for the first event, one more for each after it.
    pub seq: i64,
    /// What the publisher sent: `payload_len` bytes of UTF-8, which may hold NUL, followed by a
    /// terminating NUL; owned by the event.
    pub payload: *const c_char,
    /// The payload's length in bytes (without the terminating NUL).
    pub payload_len: usize,
    /// When it was stored, in ms since the Unix epoch (the coordinator's clock); never earlier
    /// than the event before it.
    pub published_at_ms: i64,
}

fn event_box(event: StreamEvent) -> *mut accord_stream_event {
    let payload_len = event.payload.len();
    let mut bytes = event.payload.into_bytes();
    bytes.push(0);
    let payload = Box::into_raw(bytes.into_boxed_slice()).cast::<c_char>();
    Box::into_raw(Box::new(accord_stream_event {
        stream: c_string(&event.stream).into_raw(),
        seq: event.seq,
        payload,
        payload_len,
        published_at_ms: event.published_at.timestamp_millis(),
    }))
}

/// Frees an event and what it holds. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_stream_event_free(event: *mut accord_stream_event) {
    run_or((), || {
        let Some(event) = crate::ffi::take_box(event) else {
            return;
        };
        crate::ffi::accord_string_free(event.stream as *mut c_char);
        if !event.payload.is_null() {
            let bytes =
                std::ptr::slice_from_raw_parts_mut(event.payload as *mut u8, event.payload_len + 1);
            // SAFETY: created by event_box from a boxed slice of payload_len + 1 bytes, freed
            // once by contract.
            drop(unsafe { Box::from_raw(bytes) });
        }
    })
}

/// Waits up to `timeout_ms` (negative: without limit; 0: only events already read) for the next
/// event: ACCORD_OK with `*out_event` set (free it with accord_stream_event_free()); ACCORD_OK
/// with `*out_event` NULL once the subscription is closed, or ended after ACCORD_TRIMMED;
/// ACCORD_TIMEOUT if none came; ACCORD_CANCELLED when `cancel` (may be NULL) fires;
/// ACCORD_CLOSED once its client is closed; ACCORD_TRIMMED when retention deleted events it had
/// not read yet (the message names the seq the stream starts at now; the subscription then
/// ends). A read that fails on the connection is repeated until it succeeds: no event is
/// skipped, and one ended by the timeout or the token is not lost. Blocks.
#[no_mangle]
pub extern "C" fn accord_stream_subscription_next(
    subscription: *const accord_stream_subscription,
    timeout_ms: i64,
    cancel: *const accord_cancel_token,
    out_event: *mut *mut accord_stream_event,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let s = handle("subscription", subscription)?;
        let out_event = out("out_event", out_event)?;
        *out_event = std::ptr::null_mut();
        // SAFETY: NULL or a live token, by contract.
        let cancel = unsafe { cancel.as_ref() }.map(|t| t.0.clone());
        let event = block_on(async {
            tokio::select! {
                biased;
                _ = cancelled(cancel.as_ref()) => Err(Error::cancelled("the wait for a stream event")),
                event = s.subscription.next() => event,
                _ = elapse(timeout_ms) => Err(Error::new(ErrorKind::Timeout, "no stream event within the timeout")),
            }
        })?;
        if let Some(event) = event {
            *out_event = event_box(event);
        }
        Ok(())
    })
}

fn subscription_or_null<'a>(
    subscription: *const accord_stream_subscription,
) -> Option<&'a accord_stream_subscription> {
    // SAFETY: NULL or a live subscription, by contract.
    unsafe { subscription.as_ref() }
}

/// Stores the named consumer's position: a later subscription of the consumer starts after
/// `seq`. Positions only move forward (acking an older seq changes nothing). `seq` must have
/// been delivered by this subscription (else ACCORD_INVALID_ARGUMENT naming "seq"); a
/// subscription without a consumer gives ACCORD_INVALID_ARGUMENT naming "consumer". Blocks for
/// one round trip.
#[no_mangle]
pub extern "C" fn accord_stream_subscription_ack(
    subscription: *const accord_stream_subscription,
    seq: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let s = handle("subscription", subscription)?;
        block_on(s.subscription.ack(seq))
    })
}

/// The seq of the last event delivered (before the first: where the subscription started; 0 for
/// NULL).
#[no_mangle]
pub extern "C" fn accord_stream_subscription_position(
    subscription: *const accord_stream_subscription,
) -> i64 {
    run_or(0, || {
        subscription_or_null(subscription).map_or(0, |s| s.subscription.position())
    })
}

/// The stream the subscription reads; owned by the subscription (NULL for NULL).
#[no_mangle]
pub extern "C" fn accord_stream_subscription_stream(
    subscription: *const accord_stream_subscription,
) -> *const c_char {
    run_or(std::ptr::null(), || {
        subscription_or_null(subscription).map_or(std::ptr::null(), |s| s.stream.as_ptr())
    })
}

/// The subscription's named consumer, owned by the subscription; NULL without one (and for
/// NULL).
#[no_mangle]
pub extern "C" fn accord_stream_subscription_consumer(
    subscription: *const accord_stream_subscription,
) -> *const c_char {
    run_or(std::ptr::null(), || {
        subscription_or_null(subscription)
            .and_then(|s| s.consumer.as_ref())
            .map_or(std::ptr::null(), |c| c.as_ptr())
    })
}

/// Whether the subscription is closed (by accord_stream_subscription_close(), or by closing its
/// client); true for NULL.
#[no_mangle]
pub extern "C" fn accord_stream_subscription_is_closed(
    subscription: *const accord_stream_subscription,
) -> bool {
    run_or(true, || {
        subscription_or_null(subscription).is_none_or(|s| s.subscription.is_closed())
    })
}

/// Stops reading now (a blocked accord_stream_subscription_next() returns ACCORD_OK with no
/// event, and so does every later one) and stops listening. Blocks briefly. Idempotent; NULL is
/// ignored.
#[no_mangle]
pub extern "C" fn accord_stream_subscription_close(
    subscription: *const accord_stream_subscription,
) {
    run_or((), || {
        if let Some(s) = subscription_or_null(subscription) {
            block_on(s.subscription.close());
        }
    })
}

/// Frees a subscription (closing it if needed). No other thread may use it during or after this
/// call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_stream_subscription_free(subscription: *mut accord_stream_subscription) {
    run_or((), || {
        if let Some(boxed) = crate::ffi::take_box(subscription) {
            // Dropping the listening subscription may spawn on the runtime.
            let runtime = crate::runtime::runtime();
            let _context = runtime.enter();
            drop(boxed);
        }
    })
}

/// A stream's bounds and retention. Free with accord_stream_info_free().
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct accord_stream_info {
    /// The stream's name, NUL-terminated; owned by the info.
    pub stream: *const c_char,
    /// The oldest seq still stored; `last_seq + 1` when none is.
    pub first_seq: i64,
    /// The newest seq published (0: nothing ever was).
    pub last_seq: i64,
    /// Retention: keep at most this many of the newest events (0: no bound).
    pub max_len: u64,
    /// Retention: keep events at most this many ms old (0: no bound).
    pub max_age_ms: i64,
}

/// Reads `stream`'s bounds and retention rule (a stream never published: first_seq 1,
/// last_seq 0). On success `*out_info` is an info to free with accord_stream_info_free().
/// Blocks for one round trip.
#[no_mangle]
pub extern "C" fn accord_client_stream_info(
    client: *const accord_client,
    stream: *const c_char,
    out_info: *mut *mut accord_stream_info,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let stream = text("stream", stream)?;
        let out_info = out("out_info", out_info)?;
        *out_info = std::ptr::null_mut();
        let info = block_on(c.client.stream_info(stream))?;
        *out_info = Box::into_raw(Box::new(accord_stream_info {
            stream: c_string(&info.stream).into_raw(),
            first_seq: info.first_seq,
            last_seq: info.last_seq,
            max_len: info.retention.max_len.unwrap_or(0),
            max_age_ms: info
                .retention
                .max_age
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        }));
        Ok(())
    })
}

/// Frees a stream info and its string. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_stream_info_free(info: *mut accord_stream_info) {
    run_or((), || {
        if let Some(info) = crate::ffi::take_box(info) {
            crate::ffi::accord_string_free(info.stream as *mut c_char);
        }
    })
}

/// Sets how long `stream` keeps its events, replacing its rule: at most `max_len` of the newest
/// (0: no bound; else 1 ..= 2^63-1, naming "max_len", a negative count too), none older than `max_age_ms` (0: no
/// bound; else at least 100, naming "max_age"; a negative age reaches accord as zero, which is
/// refused). Both 0 keep every event. Trims now: `*out_trimmed` (may be NULL) is how many events
/// that deleted. Later trims run in the background of publishing clients. Blocks.
#[no_mangle]
pub extern "C" fn accord_client_set_stream_retention(
    client: *const accord_client,
    stream: *const c_char,
    max_len: i64,
    max_age_ms: i64,
    out_trimmed: *mut u64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let stream = text("stream", stream)?;
        let mut retention = StreamRetention::new();
        if max_len != 0 {
            retention = retention.max_len(accord_core::limits::stream_max_len(max_len)?);
        }
        if max_age_ms != 0 {
            retention = retention.max_age(Duration::from_millis(
                u64::try_from(max_age_ms).unwrap_or(0),
            ));
        }
        let trimmed = block_on(c.client.set_stream_retention(stream, retention))?;
        // SAFETY: NULL or writable, by contract.
        if let Some(out) = unsafe { out_trimmed.as_mut() } {
            *out = trimmed;
        }
        Ok(())
    })
}
