//! libaccord: accord's C ABI. Every rule lives in the core (`accord_core`); this crate converts
//! arguments, blocks on the core's futures with one process-wide runtime, and reports failures
//! as status codes and error objects. The header `include/accord.h` is generated from these
//! sources by cbindgen (see build.rs) and documents the contract.

// C names (accord_status, accord_client, …) for what cbindgen copies into the header.
#![allow(non_camel_case_types)]
// The entry points are called from C, where `unsafe` means nothing: their pointer contracts
// are documented in accord.h and checked (NULL, UTF-8) at the boundary.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod client;
mod election;
mod error;
mod fenced;
mod ffi;
mod fleet;
mod lease;
mod list;
mod membership;
mod options;
mod pool;
mod runtime;
mod semaphore;
mod stats;
mod stream;
mod subscription;

use std::ffi::c_char;

pub use client::*;
pub use election::*;
pub use error::*;
pub use fenced::*;
pub use ffi::accord_string_free;
pub use fleet::*;
pub use lease::*;
pub use list::*;
pub use membership::*;
pub use options::*;
pub use pool::*;
pub use semaphore::*;
pub use stats::*;
pub use stream::*;
pub use subscription::*;

/// The library's version, e.g. "0.1.0" (static storage).
#[no_mangle]
pub extern "C" fn accord_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The SQL that creates or upgrades accord's schema `schema` (NULL: "accord"), for DBAs who
/// apply it by hand. `*out_sql` is freed by the caller with accord_string_free().
#[no_mangle]
pub extern "C" fn accord_migration_sql(
    schema: *const c_char,
    out_sql: *mut *mut c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    error::run(err, || {
        let schema = ffi::opt_text("schema", schema)?.unwrap_or("accord");
        let out = ffi::out("out_sql", out_sql)?;
        *out = std::ptr::null_mut();
        *out = ffi::c_string(&accord_core::migration_sql(schema)?).into_raw();
        Ok(())
    })
}

/// Stops accord's background threads. Optional: call it last, after every handle was freed
/// (for leak checkers, or before unloading the library). A later call into accord starts them
/// again.
#[no_mangle]
pub extern "C" fn accord_shutdown() {
    error::run_or((), runtime::shutdown)
}
