//! Work pools: offer keys under a prefix, claim a batch of them (each an ordinary lease), count
//! them; the claim options and the array a claim hands out.

use std::ffi::c_char;
use std::time::Duration;

use accord_core::{CancellationToken, ClaimOptions, PoolCounts};

use crate::client::accord_client;
use crate::error::{accord_error, accord_status, invalid, run, run_or};
use crate::ffi::{free_box, handle, metadata, out, text};
use crate::lease::accord_lease;
use crate::options::accord_cancel_token;
use crate::runtime::block_on;

/// Options of accord_client_claim(). Defaults: one key, the client's ttl, no metadata, no
/// waiting (an empty answer at once when nothing is claimable), no cancel token.
pub struct accord_claim_options {
    limit: i64,
    ttl: Option<Duration>,
    timeout: Option<Duration>,
    metadata: Option<accord_core::Metadata>,
    cancel: Option<CancellationToken>,
}

impl Default for accord_claim_options {
    fn default() -> Self {
        accord_claim_options {
            limit: 1,
            ttl: None,
            timeout: None,
            metadata: None,
            cancel: None,
        }
    }
}

impl accord_claim_options {
    /// The core's options; the limit is judged by the core (`InvalidArgument` naming `limit`).
    fn to_core(&self) -> Result<ClaimOptions, accord_core::Error> {
        let mut o = ClaimOptions::new().limit(accord_core::limits::claim_limit(self.limit)?);
        if let Some(ttl) = self.ttl {
            o = o.ttl(ttl);
        }
        if let Some(timeout) = self.timeout {
            o = o.timeout(timeout);
        }
        if let Some(m) = &self.metadata {
            o = o.metadata(m.clone());
        }
        if let Some(c) = &self.cancel {
            o = o.cancel(c.clone());
        }
        Ok(o)
    }
}

/// How many keys of a work pool are in each state (by the coordinator's clock).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct accord_pool_counts {
    /// Claimable now: never granted, released, or expired.
    pub free: u64,
    /// Held by a live lease.
    pub held: u64,
    /// Marked done.
    pub done: u64,
}

impl From<PoolCounts> for accord_pool_counts {
    fn from(c: PoolCounts) -> Self {
        accord_pool_counts {
            free: c.free,
            held: c.held,
            done: c.done,
        }
    }
}

/// Applies `change` to the claim options behind `options`, checking `options` is not NULL.
fn set(
    options: *mut accord_claim_options,
    err: *mut *mut accord_error,
    change: impl FnOnce(&mut accord_claim_options) -> Result<(), accord_core::Error>,
) -> accord_status {
    run(err, || {
        // SAFETY: a non-NULL options pointer was created by accord and not freed, by contract.
        let options =
            unsafe { options.as_mut() }.ok_or_else(|| invalid("options", "must not be NULL"))?;
        change(options)
    })
}

/// New claim options with the defaults (one key, no waiting). Free with
/// accord_claim_options_free().
#[no_mangle]
pub extern "C" fn accord_claim_options_new() -> *mut accord_claim_options {
    Box::into_raw(Box::default())
}

/// Frees claim options. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_claim_options_free(object: *mut accord_claim_options) {
    free_box(object)
}

/// Claim up to this many keys at once (default 1; 1 ..= 1000, checked by the claim).
#[no_mangle]
pub extern "C" fn accord_claim_options_set_limit(
    options: *mut accord_claim_options,
    limit: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.limit = limit;
        Ok(())
    })
}

/// The ttl of the claimed leases in milliseconds (default: the client's; 100 ..= 86400000;
/// refused here otherwise, with ACCORD_INVALID_ARGUMENT naming ttl and the value given).
#[no_mangle]
pub extern "C" fn accord_claim_options_set_ttl_ms(
    options: *mut accord_claim_options,
    ttl_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.ttl = Some(accord_core::limits::ttl_millis("ttl", ttl_ms)?);
        Ok(())
    })
}

/// When nothing is claimable, how long accord_client_claim() waits for a release, an offer or
/// an expiry in the pool, in milliseconds; negative waits without limit. Without it (or with
/// 0) a claim answers at once. An empty answer after the wait is not an error.
#[no_mangle]
pub extern "C" fn accord_claim_options_set_timeout_ms(
    options: *mut accord_claim_options,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.timeout = Some(crate::runtime::timeout(timeout_ms).unwrap_or(WITHOUT_LIMIT));
        Ok(())
    })
}

/// A wait "without limit": the core's claims wait up to a duration (the core's semaphore waits
/// as long for an acquire without a timeout).
const WITHOUT_LIMIT: Duration = Duration::from_secs(u64::MAX / 4);

/// Metadata merged into each claimed key's metadata: a JSON object, at most 64 KiB. NULL
/// clears it.
#[no_mangle]
pub extern "C" fn accord_claim_options_set_metadata_json(
    options: *mut accord_claim_options,
    metadata_json: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.metadata = metadata("metadata_json", metadata_json)?;
        Ok(())
    })
}

/// Lets `token` cancel a waiting claim (ACCORD_CANCELLED, nothing left held; the options keep
/// their own reference to the token); NULL clears.
#[no_mangle]
pub extern "C" fn accord_claim_options_set_cancel_token(
    options: *mut accord_claim_options,
    token: *const accord_cancel_token,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        // SAFETY: NULL or a live token, by contract.
        o.cancel = unsafe { token.as_ref() }.map(|t| t.0.clone());
        Ok(())
    })
}

/// Offers `keys[0..n_keys]` to the work pool `prefix`: each becomes claimable by
/// accord_client_claim(). Each key must start with the prefix (and be longer); at most 5000
/// keys per call. Idempotent: a key already in a pool, held or done, stays as it is; a key
/// acquired before without an offer joins the pool as it is. `metadata_json` (a JSON object, or
/// NULL) is the metadata of keys new to the coordinator. `*out_joined` (may be NULL) is how
/// many keys joined the pool. Wakes waiting claimers. Blocks.
#[no_mangle]
pub extern "C" fn accord_client_offer(
    client: *const accord_client,
    prefix: *const c_char,
    keys: *const *const c_char,
    n_keys: usize,
    metadata_json: *const c_char,
    out_joined: *mut u64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let prefix = text("prefix", prefix)?;
        if keys.is_null() && n_keys > 0 {
            return Err(invalid("keys", "must not be NULL"));
        }
        let keys: Vec<&str> = (0..n_keys)
            // SAFETY: `keys` points to `n_keys` string pointers, by contract.
            .map(|i| text(&format!("keys[{i}]"), unsafe { *keys.add(i) }))
            .collect::<Result<_, _>>()?;
        let m = metadata("metadata_json", metadata_json)?;
        let joined = block_on(c.client.offer(prefix, keys, m))?;
        // SAFETY: NULL or writable, by contract.
        if let Some(out) = unsafe { out_joined.as_mut() } {
            *out = joined;
        }
        Ok(())
    })
}

/// Claims up to the options' limit of free keys of the work pool `prefix`, oldest offer first,
/// in one statement; concurrent claimers never wait for each other and never get the same key.
/// `options` may be NULL (one key, no waiting). On ACCORD_OK `*out_leases` is an array of
/// `*out_n` leases, each freed with accord_lease_free(), the array itself with
/// accord_lease_array_free(); when nothing was claimable (after the options' timeout, if any)
/// that is ACCORD_OK with `*out_n` 0 and `*out_leases` NULL: not an error. A cancelled wait
/// gives ACCORD_CANCELLED, a closed client ACCORD_CLOSED; nothing is left held either way.
/// Blocks.
#[no_mangle]
pub extern "C" fn accord_client_claim(
    client: *const accord_client,
    prefix: *const c_char,
    options: *const accord_claim_options,
    out_leases: *mut *mut *mut accord_lease,
    out_n: *mut usize,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let prefix = text("prefix", prefix)?;
        let out_leases = out("out_leases", out_leases)?;
        *out_leases = std::ptr::null_mut();
        let out_n = out("out_n", out_n)?;
        *out_n = 0;
        // SAFETY: NULL or live options, by contract.
        let options = match unsafe { options.as_ref() } {
            Some(o) => o.to_core()?,
            None => ClaimOptions::new(),
        };
        let leases = block_on(c.client.claim(prefix, options))?;
        if leases.is_empty() {
            return Ok(());
        }
        let array: Box<[*mut accord_lease]> = leases
            .into_iter()
            .map(|lease| accord_lease::create(c, lease))
            .collect();
        *out_n = array.len();
        *out_leases = Box::into_raw(array).cast();
        Ok(())
    })
}

/// Frees the array of `n` leases accord_client_claim() returned (pass its `*out_n`), but not
/// the leases in it: each is freed with accord_lease_free(), before or after. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_lease_array_free(leases: *mut *mut accord_lease, n: usize) {
    run_or((), || {
        if !leases.is_null() {
            // SAFETY: made by accord_client_claim() from a boxed slice of `n` pointers, freed
            // once, by contract.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(leases, n)) });
        }
    })
}

/// How many keys of the work pool `prefix` are free, held and done, into `*out_counts`.
/// Blocks for one round trip.
#[no_mangle]
pub extern "C" fn accord_client_counts(
    client: *const accord_client,
    prefix: *const c_char,
    out_counts: *mut accord_pool_counts,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let prefix = text("prefix", prefix)?;
        let out_counts = out("out_counts", out_counts)?;
        *out_counts = accord_pool_counts::default();
        *out_counts = block_on(c.client.counts(prefix))?.into();
        Ok(())
    })
}
