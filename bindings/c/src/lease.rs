//! The lease handle: accessors, renew, release, done, and the lost signal (queried, waited
//! for, and reported to the client's event queue).

use std::ffi::{c_char, CStr, CString};
use std::sync::Mutex;

use accord_core::{Error, ErrorKind, Lease, LeaseStatus, LostReason, LostSignal};
use tokio::sync::mpsc;

use crate::client::{accord_client, accord_client_event, accord_client_event_kind};
use crate::error::{accord_error, accord_status, run, run_or};
use crate::ffi::{c_string, handle, json, metadata};
use crate::runtime::{block_on, elapse, runtime};

/// A held key. Every function taking a lease may be called from any thread, concurrently,
/// until accord_lease_free().
pub struct accord_lease {
    lease: Lease,
    key: CString,
    owner: CString,
}

impl accord_lease {
    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    pub(crate) fn create(client: &accord_client, lease: Lease) -> *mut accord_lease {
        Self::create_for(&client.events, lease)
    }

    /// A lease handle reporting its loss to `events`, a client's event queue (for leases that
    /// come from a semaphore handle rather than from the client itself).
    pub(crate) fn create_for(
        events: &mpsc::UnboundedSender<accord_client_event>,
        lease: Lease,
    ) -> *mut accord_lease {
        report_loss(events, lease.lost_signal(), lease.fence());
        Box::into_raw(Box::new(accord_lease {
            key: c_string(lease.key()),
            owner: c_string(lease.owner()),
            lease,
        }))
    }
}

/// Reports the loss of the lease behind `signal` to a client's event queue; the task ends when
/// the lease ends in any way (the core says when: released, done, lost, or dropped with its
/// handle). Also used for the leases of members and of a fleet's shards.
pub(crate) fn report_loss(
    events: &mpsc::UnboundedSender<accord_client_event>,
    signal: LostSignal,
    fence: i64,
) {
    let events = events.clone();
    let event = accord_client_event {
        kind: accord_client_event_kind::ACCORD_CLIENT_EVENT_LEASE_LOST,
        fence,
    };
    runtime().spawn(async move {
        if let LeaseStatus::Lost(_) = signal.ended().await {
            let _ = events.send(event);
        }
    });
}

/// The C code of a lease status (shared by leases, members and shard leases).
pub(crate) fn status_code(status: LeaseStatus) -> accord_lease_status_code {
    match status {
        LeaseStatus::Held => accord_lease_status_code::ACCORD_LEASE_STATUS_HELD,
        LeaseStatus::Ending => accord_lease_status_code::ACCORD_LEASE_STATUS_ENDING,
        LeaseStatus::Released => accord_lease_status_code::ACCORD_LEASE_STATUS_RELEASED,
        LeaseStatus::Done => accord_lease_status_code::ACCORD_LEASE_STATUS_DONE,
        _ => accord_lease_status_code::ACCORD_LEASE_STATUS_LOST,
    }
}

fn lease_or_null<'a>(lease: *const accord_lease) -> Option<&'a accord_lease> {
    // SAFETY: NULL or a live lease, by contract.
    unsafe { lease.as_ref() }
}

/// The key held; owned by the lease.
#[no_mangle]
pub extern "C" fn accord_lease_key(lease: *const accord_lease) -> *const c_char {
    run_or(std::ptr::null(), || {
        lease_or_null(lease).map_or(std::ptr::null(), |l| l.key.as_ptr())
    })
}

/// The owner of the lease; owned by the lease.
#[no_mangle]
pub extern "C" fn accord_lease_owner(lease: *const accord_lease) -> *const c_char {
    run_or(std::ptr::null(), || {
        lease_or_null(lease).map_or(std::ptr::null(), |l| l.owner.as_ptr())
    })
}

/// The fencing token of this grant: larger than that of every earlier grant (0 for NULL).
#[no_mangle]
pub extern "C" fn accord_lease_fence(lease: *const accord_lease) -> i64 {
    run_or(0, || lease_or_null(lease).map_or(0, |l| l.lease.fence()))
}

/// Whether this is one of the key's shared holders (accord_acquire_options_set_shared()); false
/// for NULL.
#[no_mangle]
pub extern "C" fn accord_lease_is_shared(lease: *const accord_lease) -> bool {
    run_or(false, || {
        lease_or_null(lease).is_some_and(|l| l.lease.is_shared())
    })
}

/// The lease's ttl in milliseconds.
#[no_mangle]
pub extern "C" fn accord_lease_ttl_ms(lease: *const accord_lease) -> i64 {
    run_or(0, || {
        lease_or_null(lease).map_or(0, |l| l.lease.ttl().as_millis() as i64)
    })
}

/// The expiry the coordinator last confirmed, in milliseconds since the Unix epoch (its clock).
#[no_mangle]
pub extern "C" fn accord_lease_expires_at_ms(lease: *const accord_lease) -> i64 {
    run_or(0, || {
        lease_or_null(lease).map_or(0, |l| l.lease.expires_at().timestamp_millis())
    })
}

/// The key's metadata as a JSON object; the caller frees it with accord_string_free().
#[no_mangle]
pub extern "C" fn accord_lease_metadata_json(lease: *const accord_lease) -> *mut c_char {
    run_or(std::ptr::null_mut(), || {
        lease_or_null(lease).map_or(std::ptr::null_mut(), |l| {
            json(&l.lease.metadata()).into_raw()
        })
    })
}

/// Whether the lease is lost (exact: checked against its deadline at each call).
#[no_mangle]
pub extern "C" fn accord_lease_is_lost(lease: *const accord_lease) -> bool {
    run_or(false, || {
        lease_or_null(lease).is_some_and(|l| l.lease.is_lost())
    })
}

/// Where a lease stands (the core keeps it; every binding reads the same).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_lease_status_code {
    /// NULL was passed.
    ACCORD_LEASE_STATUS_UNKNOWN = 0,
    /// Held and renewed in the background.
    ACCORD_LEASE_STATUS_HELD = 1,
    /// A release or done is in flight, or failed on the way: not renewed, still watched.
    ACCORD_LEASE_STATUS_ENDING = 2,
    /// Released (by accord_lease_release or by freeing the handle).
    ACCORD_LEASE_STATUS_RELEASED = 3,
    /// Marked done.
    ACCORD_LEASE_STATUS_DONE = 4,
    /// Lost: see accord_lease_lost_reason().
    ACCORD_LEASE_STATUS_LOST = 5,
}

/// The lease's status (checked against its deadline at each call, like accord_lease_is_lost).
#[no_mangle]
pub extern "C" fn accord_lease_status(lease: *const accord_lease) -> accord_lease_status_code {
    run_or(
        accord_lease_status_code::ACCORD_LEASE_STATUS_UNKNOWN,
        || {
            lease_or_null(lease)
                .map_or(accord_lease_status_code::ACCORD_LEASE_STATUS_UNKNOWN, |l| {
                    status_code(l.lease.status())
                })
        },
    )
}

/// Why the lease was lost: "not_renewed", "not_recorded", "client_closed" or "forked" (static
/// strings, never freed); NULL while it is not lost, or for NULL.
#[no_mangle]
pub extern "C" fn accord_lease_lost_reason(lease: *const accord_lease) -> *const c_char {
    run_or(std::ptr::null(), || {
        lease_or_null(lease)
            .and_then(|l| l.lease.status().lost_reason())
            .map_or(std::ptr::null(), |why| static_c_str(why.as_str()))
    })
}

/// The core's static names as C strings that live as long as the process (a handful, made once).
pub(crate) fn static_c_str(name: &'static str) -> *const c_char {
    static MADE: Mutex<Vec<(&str, &CStr)>> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = made.iter().find(|(n, _)| *n == name) {
        return c.as_ptr();
    }
    let c: &'static CStr = Box::leak(c_string(name).into_boxed_c_str());
    made.push((name, c));
    c.as_ptr()
}

/// Waits up to `timeout_ms` (negative: without limit) for the lease to be lost. ACCORD_OK once
/// lost; ACCORD_TIMEOUT if still held (or released normally) when the time is up;
/// ACCORD_CLOSED if its client was closed; ACCORD_UNSUPPORTED in a child process after fork().
/// Blocks.
#[no_mangle]
pub extern "C" fn accord_lease_wait_lost(
    lease: *const accord_lease,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("lease", lease)?;
        l.lease.check_process()?;
        let lost = l.lease.lost();
        block_on(async {
            tokio::select! {
                biased;
                _ = lost => Ok(()),
                _ = elapse(timeout_ms) => Err(Error::new(ErrorKind::Timeout, "the lease was not lost within the timeout")),
            }
        })?;
        match l.lease.status() {
            LeaseStatus::Lost(LostReason::ClientClosed) => Err(Error::closed()),
            _ => Ok(()),
        }
    })
}

/// Extends the lease now and merges `metadata_json` (a JSON object, or NULL) into the key's
/// metadata; a shared lease renews with NULL only (else ACCORD_INVALID_ARGUMENT). The lease is
/// also renewed in the background on its own. Blocks.
#[no_mangle]
pub extern "C" fn accord_lease_renew(
    lease: *const accord_lease,
    metadata_json: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("lease", lease)?;
        match metadata("metadata_json", metadata_json)? {
            Some(m) => block_on(l.lease.renew_with_metadata(m)),
            None => block_on(l.lease.renew()),
        }
    })
}

/// Releases the key (waiters wake at once). Releasing again, or after done, is harmless;
/// after the lease was lost: ACCORD_LEASE_LOST. Blocks.
#[no_mangle]
pub extern "C" fn accord_lease_release(
    lease: *const accord_lease,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("lease", lease)?;
        block_on(l.lease.release())
    })
}

/// Marks the key done (never granted again until reset), merging `metadata_json` (a JSON
/// object, or NULL), and releases it. Twice, or after loss: ACCORD_LEASE_LOST; a shared lease:
/// ACCORD_INVALID_ARGUMENT (acquire the key exclusively to finish it). Blocks.
#[no_mangle]
pub extern "C" fn accord_lease_done(
    lease: *const accord_lease,
    metadata_json: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("lease", lease)?;
        let m = metadata("metadata_json", metadata_json)?;
        block_on(l.lease.done(m))
    })
}

/// Frees the lease handle; a lease still held is released in the background. No other thread
/// may use the handle during or after this call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_lease_free(lease: *mut accord_lease) {
    run_or((), || {
        drop(crate::ffi::take_box(lease));
    })
}
