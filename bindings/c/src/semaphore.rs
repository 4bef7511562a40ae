//! The semaphore handle: at most `limit` holders of a name at once, each holding an ordinary
//! lease on one of the semaphore's permit keys.

use std::ffi::{c_char, CString};

use accord_core::{Error, ErrorKind, Semaphore};
use tokio::sync::mpsc;

use crate::client::{accord_client, accord_client_event, acquire_options};
use crate::error::{accord_error, accord_status, run, run_or};
use crate::ffi::{c_string, handle, out, text};
use crate::lease::accord_lease;
use crate::options::accord_acquire_options;
use crate::runtime::block_on;

/// A semaphore of a client: at most `limit` live holders of its name. Every function taking a
/// semaphore may be called from any thread, concurrently, until accord_semaphore_free(). Its
/// leases report their loss to the client's event queue, like the client's own.
pub struct accord_semaphore {
    semaphore: Semaphore,
    name: CString,
    events: mpsc::UnboundedSender<accord_client_event>,
}

/// Opens the semaphore `name` with `limit` permits (1 ..= 10000), offering the permits it
/// needs (the permit keys are `<name>#00000` …). A handle opened with a smaller limit than
/// another never takes a permit at or above its own limit: open every handle of a name with
/// the same limit. On success `*out_semaphore` is a semaphore to free with
/// accord_semaphore_free(). Blocks.
#[no_mangle]
pub extern "C" fn accord_client_semaphore(
    client: *const accord_client,
    name: *const c_char,
    limit: i64,
    out_semaphore: *mut *mut accord_semaphore,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let name = text("name", name)?;
        let out_semaphore = out("out_semaphore", out_semaphore)?;
        *out_semaphore = std::ptr::null_mut();
        let limit = accord_core::limits::permits(limit)?;
        let semaphore = block_on(c.client.semaphore(name, limit))?;
        *out_semaphore = Box::into_raw(Box::new(accord_semaphore {
            name: c_string(semaphore.name()),
            semaphore,
            events: c.events.clone(),
        }));
        Ok(())
    })
}

/// The semaphore's name; owned by the semaphore (NULL for NULL).
#[no_mangle]
pub extern "C" fn accord_semaphore_name(semaphore: *const accord_semaphore) -> *const c_char {
    run_or(std::ptr::null(), || {
        // SAFETY: NULL or a live semaphore, by contract.
        unsafe { semaphore.as_ref() }.map_or(std::ptr::null(), |s| s.name.as_ptr())
    })
}

/// The number of permits this handle takes from (0 for NULL).
#[no_mangle]
pub extern "C" fn accord_semaphore_limit(semaphore: *const accord_semaphore) -> i64 {
    run_or(0, || {
        // SAFETY: NULL or a live semaphore, by contract.
        unsafe { semaphore.as_ref() }.map_or(0, |s| s.semaphore.limit() as i64)
    })
}

/// Waits for a permit: up to the options' timeout (then ACCORD_TIMEOUT; negative or unset:
/// without limit), until their cancel token fires (ACCORD_CANCELLED) or the client closes
/// (ACCORD_CLOSED); nothing is left held in each case. `options` may be NULL. On success
/// `*out_lease` is a lease on a permit key, to free with accord_lease_free(). Blocks.
#[no_mangle]
pub extern "C" fn accord_semaphore_acquire(
    semaphore: *const accord_semaphore,
    options: *const accord_acquire_options,
    out_lease: *mut *mut accord_lease,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let s = handle("semaphore", semaphore)?;
        let out_lease = out("out_lease", out_lease)?;
        *out_lease = std::ptr::null_mut();
        let lease = block_on(s.semaphore.acquire(acquire_options(options)))?;
        *out_lease = accord_lease::create_for(&s.events, lease);
        Ok(())
    })
}

/// Tries once, as accord_client_try_acquire() does: ACCORD_OK with `*out_lease` set if a
/// permit was free; ACCORD_HELD (and `*out_lease` NULL) if all `limit` are held. The options'
/// timeout is ignored. Blocks for one round trip.
#[no_mangle]
pub extern "C" fn accord_semaphore_try_acquire(
    semaphore: *const accord_semaphore,
    options: *const accord_acquire_options,
    out_lease: *mut *mut accord_lease,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let s = handle("semaphore", semaphore)?;
        let out_lease = out("out_lease", out_lease)?;
        *out_lease = std::ptr::null_mut();
        match block_on(s.semaphore.try_acquire(acquire_options(options)))? {
            Some(lease) => {
                *out_lease = accord_lease::create_for(&s.events, lease);
                Ok(())
            }
            None => Err(Error::new(
                ErrorKind::Held,
                format!(
                    "every permit of semaphore {:?} is held ({} permits)",
                    s.semaphore.name(),
                    s.semaphore.limit()
                ),
            )),
        }
    })
}

/// Frees the semaphore handle (its leases stay held until released or freed). No other thread
/// may use the handle during or after this call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_semaphore_free(semaphore: *mut accord_semaphore) {
    run_or((), || {
        if let Some(boxed) = crate::ffi::take_box(semaphore) {
            // It may hold the last reference to the client's session, whose drop spawns.
            let runtime = crate::runtime::runtime();
            let _context = runtime.enter();
            drop(boxed);
        }
    })
}
