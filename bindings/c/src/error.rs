//! Status codes, the error object, and the guard every entry point runs its body in: panics are
//! caught and reported as `ACCORD_INTERNAL`, never unwound into C.

use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use accord_core::{Error, ErrorKind};

/// What a call returns. The values are part of the ABI and never change.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_status {
    /// Success.
    ACCORD_OK = 0,
    /// An argument is NULL, not UTF-8, malformed or out of range; the message names it.
    ACCORD_INVALID_ARGUMENT = 1,
    /// The key is held by a live lease (try_acquire, reset).
    ACCORD_HELD = 2,
    /// The key is done: it is not granted again until reset.
    ACCORD_DONE = 3,
    /// The wait ran out of time; nothing was left held.
    ACCORD_TIMEOUT = 4,
    /// The wait was cancelled through its accord_cancel_token; nothing was left held.
    ACCORD_CANCELLED = 5,
    /// The lease is no longer held (expired, taken over, released, done).
    ACCORD_LEASE_LOST = 6,
    /// The coordinator could not be reached, or the connection broke.
    ACCORD_CONNECTION = 7,
    /// The coordinator refused a statement (permissions, schema).
    ACCORD_DATABASE = 8,
    /// The client (or the subscription) is closed.
    ACCORD_CLOSED = 9,
    /// Not available here (backend, option, or process state such as use after fork()).
    ACCORD_UNSUPPORTED = 10,
    /// A bug in accord, including a caught panic. Please report it.
    ACCORD_INTERNAL = 11,
}

pub(crate) fn status_of(kind: ErrorKind) -> accord_status {
    use accord_status::*;
    match kind {
        ErrorKind::InvalidArgument => ACCORD_INVALID_ARGUMENT,
        ErrorKind::Held => ACCORD_HELD,
        ErrorKind::Done => ACCORD_DONE,
        ErrorKind::Timeout => ACCORD_TIMEOUT,
        ErrorKind::Cancelled => ACCORD_CANCELLED,
        ErrorKind::LeaseLost => ACCORD_LEASE_LOST,
        ErrorKind::Connection => ACCORD_CONNECTION,
        ErrorKind::Database => ACCORD_DATABASE,
        ErrorKind::Closed => ACCORD_CLOSED,
        ErrorKind::Unsupported => ACCORD_UNSUPPORTED,
        _ => ACCORD_INTERNAL,
    }
}

/// An error: a status code and a message. Created by accord, freed by the caller with
/// accord_error_free().
pub struct accord_error {
    code: accord_status,
    message: CString,
}

/// The status code of an error (ACCORD_OK for NULL).
#[no_mangle]
pub extern "C" fn accord_error_code(error: *const accord_error) -> accord_status {
    // SAFETY: the caller passes NULL or an error from accord that it has not freed.
    unsafe { error.as_ref() }.map_or(accord_status::ACCORD_OK, |e| e.code)
}

/// The message of an error, NUL-terminated, owned by the error ("" for NULL).
#[no_mangle]
pub extern "C" fn accord_error_message(error: *const accord_error) -> *const c_char {
    // SAFETY: as above.
    match unsafe { error.as_ref() } {
        Some(e) => e.message.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// Frees an error. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_error_free(error: *mut accord_error) {
    crate::ffi::free_box(error);
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs an entry point's body: clears `*err`, catches panics, and turns a failure into a
/// status and (when `err` is not NULL) an error object.
pub(crate) fn run(
    err: *mut *mut accord_error,
    body: impl FnOnce() -> Result<(), Error>,
) -> accord_status {
    if !err.is_null() {
        // SAFETY: a non-NULL `err` points to writable storage for one pointer, by contract.
        unsafe { *err = ptr::null_mut() };
    }
    let result = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        Err(Error::new(
            ErrorKind::Internal,
            format!(
                "internal error in accord (panic): {}",
                panic_message(payload)
            ),
        ))
    });
    match result {
        Ok(()) => accord_status::ACCORD_OK,
        Err(e) => {
            let code = status_of(e.kind());
            if !err.is_null() {
                let message = CString::new(e.to_string().replace('\0', " "))
                    .unwrap_or_else(|_| CString::from(c"error"));
                let error = Box::new(accord_error { code, message });
                // SAFETY: as above.
                unsafe { *err = Box::into_raw(error) };
            }
            code
        }
    }
}

/// Runs an infallible accessor, returning `fallback` if it panics.
pub(crate) fn run_or<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

pub(crate) fn invalid(field: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("invalid {field}: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_accord_internal() {
        let mut err: *mut accord_error = ptr::null_mut();
        let status = run(&mut err, || panic!("boom"));
        assert_eq!(status, accord_status::ACCORD_INTERNAL);
        assert_eq!(accord_error_code(err), accord_status::ACCORD_INTERNAL);
        // SAFETY: accord_error_message returns a NUL-terminated string owned by `err`.
        let message = unsafe { std::ffi::CStr::from_ptr(accord_error_message(err)) };
        assert!(message.to_str().unwrap().contains("boom"));
        accord_error_free(err);
        assert_eq!(run_or(7, || panic!("again")), 7);
    }

    #[test]
    fn errors_map_to_their_status_and_clear_the_out_pointer() {
        let mut err: *mut accord_error = ptr::dangling_mut(); // stale garbage from the caller
        assert_eq!(run(&mut err, || Ok(())), accord_status::ACCORD_OK);
        assert!(err.is_null());
        let status = run(&mut err, || Err(Error::new(ErrorKind::LeaseLost, "gone")));
        assert_eq!(status, accord_status::ACCORD_LEASE_LOST);
        accord_error_free(err);
        // Without an error object, the status alone.
        let status = run(ptr::null_mut(), || Err(Error::new(ErrorKind::Held, "held")));
        assert_eq!(status, accord_status::ACCORD_HELD);
    }
}
