//! Status codes, the error object, and the guard every entry point runs its body in: panics are
//! caught and reported as `ACCORD_INTERNAL`, never unwound into C.

use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::OnceLock;

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
    /// A stream's retention deleted the events asked for (a subscription's start, or events a
    /// subscription had not read yet); the message names the seq the stream starts at now.
    ACCORD_TRIMMED = 12,
}

/// Every status but ACCORD_OK, in value order: one per error kind of the core.
pub(crate) const ERROR_STATUSES: [accord_status; 12] = {
    use accord_status::*;
    [
        ACCORD_INVALID_ARGUMENT,
        ACCORD_HELD,
        ACCORD_DONE,
        ACCORD_TIMEOUT,
        ACCORD_CANCELLED,
        ACCORD_LEASE_LOST,
        ACCORD_CONNECTION,
        ACCORD_DATABASE,
        ACCORD_CLOSED,
        ACCORD_UNSUPPORTED,
        ACCORD_INTERNAL,
        ACCORD_TRIMMED,
    ]
};

/// The core's kind of an error status (`None` for ACCORD_OK): the inverse of [`status_of`].
pub(crate) fn kind_of(status: accord_status) -> Option<ErrorKind> {
    use accord_status::*;
    Some(match status {
        ACCORD_OK => return None,
        ACCORD_INVALID_ARGUMENT => ErrorKind::InvalidArgument,
        ACCORD_HELD => ErrorKind::Held,
        ACCORD_DONE => ErrorKind::Done,
        ACCORD_TIMEOUT => ErrorKind::Timeout,
        ACCORD_CANCELLED => ErrorKind::Cancelled,
        ACCORD_LEASE_LOST => ErrorKind::LeaseLost,
        ACCORD_CONNECTION => ErrorKind::Connection,
        ACCORD_DATABASE => ErrorKind::Database,
        ACCORD_CLOSED => ErrorKind::Closed,
        ACCORD_UNSUPPORTED => ErrorKind::Unsupported,
        ACCORD_INTERNAL => ErrorKind::Internal,
        ACCORD_TRIMMED => ErrorKind::Trimmed,
    })
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
        ErrorKind::Trimmed => ACCORD_TRIMMED,
        _ => ACCORD_INTERNAL,
    }
}

/// The name of a status, the same as its enumerator ("ACCORD_OK", "ACCORD_HELD", …) and as the
/// error kind's code in the other languages (Node's `err.code`, Python's `AccordError.code`);
/// static storage. NULL for a value that is not an accord_status.
#[no_mangle]
pub extern "C" fn accord_status_name(status: i32) -> *const c_char {
    // Indexed by status value: "ACCORD_OK", then the core's code of each error status's kind.
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    run_or(ptr::null(), || {
        let names = NAMES.get_or_init(|| {
            std::iter::once(c"ACCORD_OK".to_owned())
                .chain(
                    ERROR_STATUSES
                        .iter()
                        .map(|s| crate::ffi::c_string(kind_of(*s).map_or("", |kind| kind.code()))),
                )
                .collect()
        });
        usize::try_from(status)
            .ok()
            .and_then(|i| names.get(i))
            .map_or(ptr::null(), |name| name.as_ptr())
    })
}

/// An error: a status code and a message. Created by accord, freed by the caller with
/// accord_error_free().
pub struct accord_error {
    code: accord_status,
    /// The message in C's words.
    message: CString,
    /// The core's error, for the message in another language's words
    /// (accord_error_message_in).
    error: Error,
    /// Go's words, rendered at the first accord_error_message_in(…, ACCORD_WORDS_GO).
    go_message: OnceLock<CString>,
}

/// The words an error's message is written in (accord_error_message_in).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_words {
    /// C's: durations in milliseconds (as the `_ms` setters take them), fields as the
    /// setters name them (`handoff_timeout`); what accord_error_message returns.
    ACCORD_WORDS_C = 0,
    /// Go's, for the Go package built on this library: durations as `time.Duration` prints
    /// them (`1m30s`, `300ms`), fields as the Go options name them (`HandoffTimeout`, `TTL`).
    ACCORD_WORDS_GO = 1,
}

/// How C's messages write durations and fields.
const C_STYLE: accord_core::Style = accord_core::Style {
    durations: accord_core::Durations::Millis,
    fields: accord_core::Fields::Snake,
};

/// How the Go package's messages write durations and fields.
const GO_STYLE: accord_core::Style = accord_core::Style {
    durations: accord_core::Durations::Go,
    fields: accord_core::Fields::Go,
};

fn c_message(text: String) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_else(|_| CString::from(c"error"))
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

/// The message of an error in the words of `words` (an accord_words value; C's for another
/// value), NUL-terminated, owned by the error ("" for NULL). For language bindings built on
/// this library, so that their messages read in their own units and names.
#[no_mangle]
pub extern "C" fn accord_error_message_in(error: *const accord_error, words: i32) -> *const c_char {
    run_or(c"".as_ptr(), || {
        // SAFETY: as above.
        let Some(e) = (unsafe { error.as_ref() }) else {
            return c"".as_ptr();
        };
        if words == accord_words::ACCORD_WORDS_GO as i32 {
            e.go_message
                .get_or_init(|| c_message(e.error.message_in(&GO_STYLE)))
                .as_ptr()
        } else {
            e.message.as_ptr()
        }
    })
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
                let message = c_message(e.message_in(&C_STYLE));
                let error = Box::new(accord_error {
                    code,
                    message,
                    error: e,
                    go_message: OnceLock::new(),
                });
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

/// `Closed`, for a call on a closed client: the core's error, message included.
pub(crate) fn closed() -> Error {
    Error::closed()
}

/// `InvalidArgument` naming `field`, worded as the core words its own checks.
pub(crate) fn invalid(field: &str, why: &str) -> Error {
    Error::invalid(field, why)
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

    fn name(status: i32) -> Option<&'static str> {
        let name = accord_status_name(status);
        // SAFETY: NULL or a NUL-terminated string of static storage.
        (!name.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(name) }.to_str().unwrap())
    }

    /// The error kinds docs/semantics.md lists (the first paragraph of its "Errors" section), so
    /// that the docs cannot fall behind the core's `ErrorKind::ALL`.
    fn documented_kinds() -> std::collections::BTreeSet<String> {
        let docs = include_str!("../../../docs/semantics.md");
        let list = docs
            .split("\n## Errors\n")
            .nth(1)
            .and_then(|rest| rest.trim_start().split("\n\n").next())
            .expect("docs/semantics.md has an Errors section");
        list.split('`')
            .skip(1)
            .step_by(2)
            .filter(|t| t.starts_with(char::is_uppercase) && t.chars().all(char::is_alphanumeric))
            .filter(|t| *t != "ErrorKind")
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn statuses_and_kinds_are_one_to_one() {
        let mut kinds = std::collections::BTreeSet::new();
        for (i, &status) in ERROR_STATUSES.iter().enumerate() {
            assert_eq!(
                status as usize,
                i + 1,
                "ERROR_STATUSES is in value order, no gap"
            );
            let kind = kind_of(status).expect("an error status has a kind");
            assert!(
                kinds.insert(format!("{kind:?}")),
                "{status:?}: kind {kind:?} twice"
            );
            assert_eq!(status_of(kind), status, "{kind:?} maps back to {status:?}");
            // The enumerator, its name at run time and the kind's code are one name.
            assert_eq!(format!("{status:?}"), kind.code());
            assert_eq!(name(status as i32), Some(kind.code()));
        }
        assert_eq!(kind_of(accord_status::ACCORD_OK), None);
        assert_eq!(name(0), Some("ACCORD_OK"));
        assert_eq!(name(ERROR_STATUSES.len() as i32 + 1), None);
        assert_eq!(name(-1), None);
        assert_eq!(
            kinds,
            documented_kinds(),
            "every documented kind has its status"
        );
        // The core's own list, in status order: a kind added there needs its status here.
        let from_core: Vec<accord_status> = ErrorKind::ALL.iter().map(|&k| status_of(k)).collect();
        assert_eq!(from_core, ERROR_STATUSES.to_vec());
    }

    #[test]
    fn messages_read_in_c_or_go_words() {
        let message_in = |err: *const accord_error, words: i32| {
            // SAFETY: a NUL-terminated string owned by `err`.
            unsafe { std::ffi::CStr::from_ptr(accord_error_message_in(err, words)) }
                .to_str()
                .unwrap()
                .to_string()
        };
        let mut err: *mut accord_error = ptr::null_mut();
        run(&mut err, || {
            accord_core::limits::ttl_millis("ttl", 25 * 3_600_000).map(drop)
        });
        let c = "invalid ttl: 90000000 ms is outside the allowed range 100 ms..=86400000 ms";
        assert_eq!(message_in(err, accord_words::ACCORD_WORDS_C as i32), c);
        // SAFETY: as above.
        let plain = unsafe { std::ffi::CStr::from_ptr(accord_error_message(err)) };
        assert_eq!(plain.to_str().unwrap(), c);
        assert_eq!(
            message_in(err, accord_words::ACCORD_WORDS_GO as i32),
            "invalid TTL: 25h0m0s is outside the allowed range 100ms..=24h0m0s"
        );
        assert_eq!(message_in(err, 99), c, "an unknown value: C's words");
        assert_eq!(message_in(ptr::null(), 1), "");
        accord_error_free(err);
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
