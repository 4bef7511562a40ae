//! Subscriptions, read pull-style: accord_subscription_next() waits for the next message or
//! Reconnected event with a timeout.

use std::ffi::c_char;

use accord_core::{Error, ErrorKind, Event, Subscription};

use crate::error::{accord_error, accord_status, run, run_or};
use crate::ffi::{c_string, handle, out};
use crate::runtime::{block_on, elapse};

/// Notifications on one or more channels. next() may block in one thread while close() is
/// called from another; free only after every call on it has returned.
pub struct accord_subscription {
    subscription: Subscription,
}

impl accord_subscription {
    pub(crate) fn new(subscription: Subscription) -> Self {
        accord_subscription { subscription }
    }
}

/// What an event is.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_event_kind {
    /// A notification: `channel` and `payload` are set.
    ACCORD_EVENT_MESSAGE = 1,
    /// The listening connection was re-established; notifications sent meanwhile were missed.
    /// `channel` and `payload` are NULL.
    ACCORD_EVENT_RECONNECTED = 2,
}

/// One event of a subscription. Free with accord_event_free().
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct accord_event {
    /// What happened.
    pub kind: accord_event_kind,
    /// The channel (messages only), NUL-terminated.
    pub channel: *const c_char,
    /// The payload (messages only; may be empty), NUL-terminated.
    pub payload: *const c_char,
}

/// Waits up to `timeout_ms` (negative: without limit; 0: only what is queued) for the next
/// event. ACCORD_OK with `*out_event` set (free it with accord_event_free()); ACCORD_TIMEOUT if
/// none came; ACCORD_CLOSED once the subscription or its client is closed.
#[no_mangle]
pub extern "C" fn accord_subscription_next(
    subscription: *const accord_subscription,
    timeout_ms: i64,
    out_event: *mut *mut accord_event,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let s = handle("subscription", subscription)?;
        let out_event = out("out_event", out_event)?;
        *out_event = std::ptr::null_mut();
        let event = block_on(async {
            tokio::select! {
                biased;
                event = s.subscription.recv() => event,
                _ = elapse(timeout_ms) => Err(Error::new(ErrorKind::Timeout, "no notification within the timeout")),
            }
        })?;
        // The core answers Ok(None) for a subscription closed by accord_subscription_close():
        // C says that with ACCORD_CLOSED and a message of its own, since the core has none for
        // it. A closed client is the core's Err(Closed), passed on above as it is.
        let event =
            event.ok_or_else(|| Error::new(ErrorKind::Closed, "the subscription is closed"))?;
        let boxed = match event {
            Event::Message(m) => accord_event {
                kind: accord_event_kind::ACCORD_EVENT_MESSAGE,
                channel: c_string(&m.channel).into_raw(),
                payload: c_string(&m.payload).into_raw(),
            },
            Event::Reconnected => accord_event {
                kind: accord_event_kind::ACCORD_EVENT_RECONNECTED,
                channel: std::ptr::null(),
                payload: std::ptr::null(),
            },
        };
        *out_event = Box::into_raw(Box::new(boxed));
        Ok(())
    })
}

/// Frees an event. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_event_free(event: *mut accord_event) {
    let Some(event) = crate::ffi::take_box(event) else {
        return;
    };
    // Its strings came from CString::into_raw.
    for s in [event.channel, event.payload] {
        crate::ffi::accord_string_free(s as *mut c_char);
    }
}

/// Stops delivery now: a blocked accord_subscription_next() returns ACCORD_CLOSED. UNLISTENs
/// what no other subscription needs. Blocks briefly. Idempotent; NULL is ignored.
#[no_mangle]
pub extern "C" fn accord_subscription_close(subscription: *const accord_subscription) {
    run_or((), || {
        // SAFETY: NULL or a live subscription, by contract.
        if let Some(s) = unsafe { subscription.as_ref() } {
            block_on(s.subscription.close());
        }
    })
}

/// Frees a subscription (closing it if needed). No other thread may use it during or after
/// this call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_subscription_free(subscription: *mut accord_subscription) {
    run_or((), || {
        crate::ffi::free_box(subscription);
    })
}
