//! Fenced writes for libpq (or any driver): the statements a lease runs in the application's
//! own transaction, as text and parameters, and accord's error for a refused one. The core
//! makes the statements (`Lease::fenced_call`, `Lease::done_in_call`) and words the errors
//! (`accord_core::fenced_refusal`); this file hands them to C.

use std::ffi::c_char;

use accord_core::{Error, SqlCall};

use crate::error::{accord_error, accord_status, run, run_or};
use crate::ffi::{c_string, handle, metadata, out, text};
use crate::lease::accord_lease;

/// Writes the call that `make` answers to the out-pointers: the text, and the parameters as
/// strings (NULL for SQL NULL) in the order of `$1`, `$2`, …; NULL and 0 when it fails.
fn hand_out(
    out_text: *mut *mut c_char,
    out_params: *mut *mut *mut c_char,
    out_n_params: *mut usize,
    make: impl FnOnce() -> Result<SqlCall, Error>,
) -> Result<(), Error> {
    let out_text = out("out_text", out_text)?;
    *out_text = std::ptr::null_mut();
    let out_params = out("out_params", out_params)?;
    *out_params = std::ptr::null_mut();
    let out_n_params = out("out_n_params", out_n_params)?;
    *out_n_params = 0;
    let call = make()?;
    let params: Box<[*mut c_char]> = call
        .params
        .iter()
        .map(|p| {
            p.to_text()
                .map_or(std::ptr::null_mut(), |v| c_string(&v).into_raw())
        })
        .collect();
    *out_n_params = params.len();
    *out_params = Box::into_raw(params).cast();
    *out_text = c_string(&call.text).into_raw();
    Ok(())
}

/// The statement that checks this lease in the application's transaction, for libpq's
/// PQexecParams(conn, *out_text, *out_n_params, NULL, *out_params, NULL, NULL, 0): run it after
/// BEGIN and before the writes. After it succeeds, every write of that transaction commits
/// before any later grant of the key, even if the lease expires before the commit (the key's
/// row is held until the transaction ends: the lease's own renewal waits for it, so keep such
/// transactions well inside the ttl). A refusal (PGRES_FATAL_ERROR): pass its SQLSTATE and
/// message to accord_fenced_refusal(), then roll back.
///
/// `*out_text` is freed with accord_string_free(), `*out_params` (an array of `*out_n_params`
/// strings) with accord_string_array_free(); NULL and 0 when the call fails. ACCORD_LEASE_LOST when the lease is already not
/// held here; ACCORD_UNSUPPORTED on the embedded store (sqlite:), which no transaction of the
/// application's database can see. Never blocks.
#[no_mangle]
pub extern "C" fn accord_lease_fence_check_sql(
    lease: *const accord_lease,
    out_text: *mut *mut c_char,
    out_params: *mut *mut *mut c_char,
    out_n_params: *mut usize,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("lease", lease)?;
        hand_out(out_text, out_params, out_n_params, || {
            l.lease().fenced_call()
        })
    })
}

/// The statement that marks this lease's key done in the application's transaction, merging
/// `metadata_json` (a JSON object, or NULL); it answers one row, one column: the key's metadata
/// as JSON text. Run it as accord_lease_fence_check_sql()'s statement, then call
/// accord_lease_done_sent(), then commit or roll back: the done commits with the transaction's
/// writes or not at all. After the commit the lease settles as ACCORD_LEASE_STATUS_DONE (not
/// lost); after a rollback it is still held and renewed.
///
/// Frees and errors as accord_lease_fence_check_sql(); a shared lease:
/// ACCORD_INVALID_ARGUMENT (acquire the key exclusively to finish it). Never blocks.
#[no_mangle]
pub extern "C" fn accord_lease_done_sql(
    lease: *const accord_lease,
    metadata_json: *const c_char,
    out_text: *mut *mut c_char,
    out_params: *mut *mut *mut c_char,
    out_n_params: *mut usize,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("lease", lease)?;
        hand_out(out_text, out_params, out_n_params, || {
            let m = metadata("metadata_json", metadata_json)?;
            l.lease().done_in_call(m.as_ref())
        })
    })
}

/// Tells the lease that accord_lease_done_sql()'s statement ran in the application's
/// transaction (answered or not): it settles as done at once after the commit (otherwise at its
/// next renewal), and is renewed as before after a rollback. NULL is accepted. Never blocks.
#[no_mangle]
pub extern "C" fn accord_lease_done_sent(lease: *const accord_lease) {
    run_or((), || {
        // SAFETY: NULL or a live lease, by contract.
        if let Some(l) = unsafe { lease.as_ref() } {
            l.lease().done_in_sent();
        }
    })
}

/// accord's error for a statement of accord_lease_fence_check_sql() or accord_lease_done_sql()
/// that the server refused: `what` names the call ("check_fence", "done"), `sqlstate` and
/// `message` are the server's (libpq: PQresultErrorField(res, PG_DIAG_SQLSTATE) and
/// PG_DIAG_MESSAGE_PRIMARY). Returns the status and sets `*err`: ACCORD_LEASE_LOST when the
/// lease is not the key's live grant (SQLSTATE AC001; the message names key, fence and why),
/// ACCORD_INVALID_ARGUMENT for a refused argument, ACCORD_DATABASE otherwise.
#[no_mangle]
pub extern "C" fn accord_fenced_refusal(
    what: *const c_char,
    sqlstate: *const c_char,
    message: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let what = text("what", what)?;
        let sqlstate = text("sqlstate", sqlstate)?;
        let message = text("message", message)?;
        Err(accord_core::fenced_refusal(what, sqlstate, message))
    })
}
