//! The client handle: connect, acquire, try-acquire, reset, list, notify, listen, close, and
//! the client's event queue (leases lost) for bindings that drive it from one thread.

use std::ffi::{c_char, CString};

use accord_core::{Client, Error, ErrorKind};
use tokio::sync::mpsc;

use crate::error::{accord_error, accord_status, run, run_or};
use crate::ffi::{c_string, handle, opt_text, out, text};
use crate::lease::accord_lease;
use crate::list::accord_list_page;
use crate::options::{accord_acquire_options, accord_client_options, accord_list_query};
use crate::runtime::{block_on, elapse};
use crate::subscription::accord_subscription;

/// A connection to a coordinator. Every function taking a client may be called from any thread,
/// concurrently.
pub struct accord_client {
    pub(crate) client: Client,
    owner: CString,
    namespace: CString,
    pub(crate) events: mpsc::UnboundedSender<accord_client_event>,
    receiver: tokio::sync::Mutex<mpsc::UnboundedReceiver<accord_client_event>>,
}

/// What accord_client_next_event() reports.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_client_event_kind {
    /// The lease with `fence` was lost: stop the work it protects.
    ACCORD_CLIENT_EVENT_LEASE_LOST = 1,
}

/// One event of a client.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug)]
pub struct accord_client_event {
    /// What happened.
    pub kind: accord_client_event_kind,
    /// The fence of the lease concerned (unique per grant).
    pub fence: i64,
}

/// Connects to the coordinator at `url` (`postgres://user:password@host:port/db?sslmode=…`).
/// `options` may be NULL for every default. Blocks until connected (and migrated) or failed.
/// On success `*out_client` is a client to free with accord_client_free().
#[no_mangle]
pub extern "C" fn accord_client_connect(
    url: *const c_char,
    options: *const accord_client_options,
    out_client: *mut *mut accord_client,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let url = text("url", url)?;
        let out_client = out("out_client", out_client)?;
        *out_client = std::ptr::null_mut();
        // SAFETY: NULL or live options, by contract.
        let options = unsafe { options.as_ref() }
            .map(|o| o.0.clone())
            .unwrap_or_default();
        let client = block_on(Client::connect(url, options))?;
        let (events, receiver) = mpsc::unbounded_channel();
        *out_client = Box::into_raw(Box::new(accord_client {
            owner: c_string(client.owner()),
            namespace: c_string(client.namespace()),
            client,
            events,
            receiver: tokio::sync::Mutex::new(receiver),
        }));
        Ok(())
    })
}

/// The owner recorded on this client's leases; owned by the client.
#[no_mangle]
pub extern "C" fn accord_client_owner(client: *const accord_client) -> *const c_char {
    run_or(std::ptr::null(), || {
        // SAFETY: NULL or a live client, by contract.
        unsafe { client.as_ref() }.map_or(std::ptr::null(), |c| c.owner.as_ptr())
    })
}

/// The namespace of this client's keys; owned by the client.
#[no_mangle]
pub extern "C" fn accord_client_namespace(client: *const accord_client) -> *const c_char {
    run_or(std::ptr::null(), || {
        // SAFETY: NULL or a live client, by contract.
        unsafe { client.as_ref() }.map_or(std::ptr::null(), |c| c.namespace.as_ptr())
    })
}

/// How many times this client's waiting acquires were woken by another client's release (each
/// release wakes the head of its key's line only). A diagnostic, for tests (0 for NULL).
#[no_mangle]
pub extern "C" fn accord_client_waiter_wakeups(client: *const accord_client) -> u64 {
    run_or(0, || {
        // SAFETY: NULL or a live client, by contract.
        unsafe { client.as_ref() }.map_or(0, |c| c.client.waiter_wakeups())
    })
}

/// How many leases this client holds and keeps alive now (0 for NULL).
#[no_mangle]
pub extern "C" fn accord_client_held_count(client: *const accord_client) -> usize {
    run_or(0, || {
        // SAFETY: NULL or a live client, by contract.
        unsafe { client.as_ref() }.map_or(0, |c| c.client.held_count())
    })
}

/// How many of this client's waiting acquires (and campaigns) hold a place in a key's line now.
/// A diagnostic: tests wait for it to order waiters without sleeping (0 for NULL).
#[no_mangle]
pub extern "C" fn accord_client_queued_count(client: *const accord_client) -> usize {
    run_or(0, || {
        // SAFETY: NULL or a live client, by contract.
        unsafe { client.as_ref() }.map_or(0, |c| c.client.queued_count())
    })
}

pub(crate) fn acquire_options(
    options: *const accord_acquire_options,
) -> accord_core::AcquireOptions {
    // SAFETY: NULL or live options, by contract.
    unsafe { options.as_ref() }
        .map(|o| o.to_core())
        .unwrap_or_default()
}

/// Waits until `key` is granted (or the options' timeout passes: ACCORD_TIMEOUT, or their
/// cancel token fires: ACCORD_CANCELLED, or the client closes: ACCORD_CLOSED; in each case
/// nothing is left held). A done key gives ACCORD_DONE. `options` may be NULL. Blocks. On
/// success `*out_lease` is a lease to free with accord_lease_free().
#[no_mangle]
pub extern "C" fn accord_client_acquire(
    client: *const accord_client,
    key: *const c_char,
    options: *const accord_acquire_options,
    out_lease: *mut *mut accord_lease,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let key = text("key", key)?;
        let out_lease = out("out_lease", out_lease)?;
        *out_lease = std::ptr::null_mut();
        let lease = block_on(c.client.acquire(key, acquire_options(options)))?;
        *out_lease = accord_lease::create(c, lease);
        Ok(())
    })
}

/// Tries once: ACCORD_OK with `*out_lease` set if `key` was free (for a shared acquire: free or
/// held shared, with nobody waiting in line); ACCORD_HELD (and `*out_lease` NULL) if not (held
/// by anyone, this client included); ACCORD_DONE if done. The options' timeout is ignored.
/// Blocks for one round trip.
#[no_mangle]
pub extern "C" fn accord_client_try_acquire(
    client: *const accord_client,
    key: *const c_char,
    options: *const accord_acquire_options,
    out_lease: *mut *mut accord_lease,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let key_text = text("key", key)?;
        let out_lease = out("out_lease", out_lease)?;
        *out_lease = std::ptr::null_mut();
        match block_on(c.client.try_acquire(key_text, acquire_options(options)))? {
            Some(lease) => {
                *out_lease = accord_lease::create(c, lease);
                Ok(())
            }
            None => Err(Error::held(key_text)),
        }
    })
}

/// Makes a done or free key unknown again, so that it can be acquired. `*out_existed` (may be
/// NULL) tells whether there was anything to reset. A key held by a live lease: ACCORD_HELD.
#[no_mangle]
pub extern "C" fn accord_client_reset(
    client: *const accord_client,
    key: *const c_char,
    out_existed: *mut bool,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let key = text("key", key)?;
        let existed = block_on(c.client.reset(key))?;
        // SAFETY: NULL or writable, by contract.
        if let Some(out) = unsafe { out_existed.as_mut() } {
            *out = existed;
        }
        Ok(())
    })
}

/// Lists keys, in key order, one page at a time. `query` may be NULL (every key, 100
/// per page). On success `*out_page` is a page to free with accord_list_page_free().
#[no_mangle]
pub extern "C" fn accord_client_list(
    client: *const accord_client,
    query: *const accord_list_query,
    out_page: *mut *mut accord_list_page,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let out_page = out("out_page", out_page)?;
        *out_page = std::ptr::null_mut();
        // SAFETY: NULL or a live query, by contract.
        let query = unsafe { query.as_ref() }
            .map(|q| q.to_core())
            .unwrap_or_default();
        let page = block_on(c.client.list(query))?;
        *out_page = accord_list_page::create(page);
        Ok(())
    })
}

/// Sends `payload` (may be NULL for "") on `channel` to every listener. Blocks for one round
/// trip.
#[no_mangle]
pub extern "C" fn accord_client_notify(
    client: *const accord_client,
    channel: *const c_char,
    payload: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let channel = text("channel", channel)?;
        let payload = opt_text("payload", payload)?.unwrap_or("");
        block_on(c.client.notify(channel, payload))
    })
}

/// Starts receiving notifications on `channels[0..count]`. Returns once every notification
/// sent from then on will be delivered. On success `*out_subscription` is a subscription to
/// read with accord_subscription_next() and free with accord_subscription_free().
#[no_mangle]
pub extern "C" fn accord_client_listen(
    client: *const accord_client,
    channels: *const *const c_char,
    count: usize,
    out_subscription: *mut *mut accord_subscription,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let out_sub = out("out_subscription", out_subscription)?;
        *out_sub = std::ptr::null_mut();
        if channels.is_null() && count > 0 {
            return Err(crate::error::invalid("channels", "must not be NULL"));
        }
        let names: Vec<&str> = (0..count)
            // SAFETY: `channels` points to `count` string pointers, by contract.
            .map(|i| text(&format!("channels[{i}]"), unsafe { *channels.add(i) }))
            .collect::<Result<_, _>>()?;
        let subscription = block_on(c.client.listen(names))?;
        *out_sub = Box::into_raw(Box::new(accord_subscription::new(subscription)));
        Ok(())
    })
}

/// Waits up to `timeout_ms` (negative: without limit) for the client's next event. ACCORD_OK
/// with `*out_event` filled; ACCORD_TIMEOUT if none came; ACCORD_CLOSED once the client is
/// closed (every lease of a closed client is over, lost events or not). Meant for one reader
/// thread per client.
#[no_mangle]
pub extern "C" fn accord_client_next_event(
    client: *const accord_client,
    timeout_ms: i64,
    out_event: *mut accord_client_event,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let out_event = out("out_event", out_event)?;
        let closed = c.client.closed();
        block_on(async {
            let mut receiver = c.receiver.lock().await;
            tokio::select! {
                biased;
                Some(event) = receiver.recv() => {
                    *out_event = event;
                    Ok(())
                }
                _ = closed => Err(crate::error::closed()),
                _ = elapse(timeout_ms) => Err(Error::new(ErrorKind::Timeout, "no event within the timeout")),
            }
        })
    })
}

/// Closes the client: held leases are released (their lost signals fire), waiting acquires,
/// subscriptions and accord_client_next_event() return ACCORD_CLOSED, connections close.
/// Afterwards renew, release and done of any of its leases return ACCORD_CLOSED.
/// Blocks until done. Idempotent; NULL is ignored. The handle stays valid until freed.
#[no_mangle]
pub extern "C" fn accord_client_close(client: *const accord_client) {
    run_or((), || {
        // SAFETY: NULL or a live client, by contract.
        if let Some(c) = unsafe { client.as_ref() } {
            block_on(c.client.close());
        }
    })
}

/// Frees the client handle. Leases and subscriptions keep the connection open until they are
/// freed too; call accord_client_close() first to end everything now. No other thread may use
/// the handle during or after this call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_client_free(client: *mut accord_client) {
    run_or((), || {
        if let Some(boxed) = crate::ffi::take_box(client) {
            // Dropping the last handle closes the core client, which spawns on the runtime.
            let runtime = crate::runtime::runtime();
            let _context = runtime.enter();
            drop(boxed);
        }
    })
}
