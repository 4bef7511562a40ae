//! Reading what C passes in (strings, handles) with clear errors, and handing strings out.

use std::ffi::{c_char, CStr, CString};

use accord_core::Error;

use crate::error::invalid;

/// A required string argument: not NULL, valid UTF-8.
pub(crate) fn text<'a>(field: &str, ptr: *const c_char) -> Result<&'a str, Error> {
    if ptr.is_null() {
        return Err(invalid(field, "must not be NULL"));
    }
    // SAFETY: a non-NULL string argument is NUL-terminated and outlives the call, by contract.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| invalid(field, "is not valid UTF-8"))
}

/// An optional string argument: NULL means absent.
pub(crate) fn opt_text<'a>(field: &str, ptr: *const c_char) -> Result<Option<&'a str>, Error> {
    if ptr.is_null() {
        Ok(None)
    } else {
        text(field, ptr).map(Some)
    }
}

/// A JSON object argument (NULL means absent).
pub(crate) fn metadata(
    field: &str,
    ptr: *const c_char,
) -> Result<Option<accord_core::Metadata>, Error> {
    let Some(json) = opt_text(field, ptr)? else {
        return Ok(None);
    };
    serde_json::from_str::<accord_core::Metadata>(json)
        .map(Some)
        .map_err(|e| invalid(field, &format!("is not a JSON object ({e})")))
}

/// A required handle argument.
pub(crate) fn handle<'a, T>(field: &str, ptr: *const T) -> Result<&'a T, Error> {
    // SAFETY: a non-NULL handle was created by accord and not freed yet, by contract.
    unsafe { ptr.as_ref() }.ok_or_else(|| invalid(field, "must not be NULL"))
}

/// A required out-pointer argument.
pub(crate) fn out<'a, T>(field: &str, ptr: *mut T) -> Result<&'a mut T, Error> {
    // SAFETY: a non-NULL out-pointer points to writable storage, by contract.
    unsafe { ptr.as_mut() }.ok_or_else(|| invalid(field, "must not be NULL"))
}

/// Takes back what accord handed out with `Box::into_raw`; `None` for NULL.
pub(crate) fn take_box<T>(ptr: *mut T) -> Option<Box<T>> {
    // SAFETY: a non-NULL pointer of this type was created by Box::into_raw in accord and is
    // freed once, by contract (every *_free function documents it).
    (!ptr.is_null()).then(|| unsafe { Box::from_raw(ptr) })
}

/// Frees what accord boxed. NULL is accepted.
pub(crate) fn free_box<T>(ptr: *mut T) {
    drop(take_box(ptr));
}

/// A string for C; text never holds NUL (accord refuses it on input), but be safe.
pub(crate) fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "\u{FFFD}")).unwrap_or_default()
}

pub(crate) fn json(value: &accord_core::Metadata) -> CString {
    c_string(&serde_json::to_string(value).unwrap_or_else(|_| "{}".into()))
}

/// Frees a string that accord returned as `char *` (documented per function). NULL is
/// accepted.
#[no_mangle]
pub extern "C" fn accord_string_free(string: *mut c_char) {
    if !string.is_null() {
        // SAFETY: created by CString::into_raw in accord, freed once by contract.
        drop(unsafe { CString::from_raw(string) });
    }
}
