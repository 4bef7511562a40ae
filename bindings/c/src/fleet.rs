//! Fleets: shards balanced among the members of a fleet in the background; their events
//! (Assigned, Revoked) read pull-style with accord_fleet_next_event(), which also acknowledges
//! the previous event (a hand-off's shard is released then).

use std::ffi::{c_char, CString};
use std::time::Duration;

use accord_core::{Error, ErrorKind, Fleet, FleetEvent, FleetOptions, RevokeReason, ShardLease};
use tokio::sync::mpsc;

use crate::client::{accord_client, accord_client_event};
use crate::error::{accord_error, accord_status, invalid, run, run_or};
use crate::ffi::{c_string, free_box, handle, metadata, out, text};
use crate::lease::{accord_lease_status_code, report_loss, static_c_str, status_code};
use crate::membership::{accord_member_info, cancelled, member_array, wait_lost};
use crate::options::accord_cancel_token;
use crate::runtime::{block_on, elapse};

/// Options of accord_client_fleet(). The shards are required: set them with
/// accord_fleet_options_set_shards() or accord_fleet_options_set_keys() (not both). Defaults:
/// the client's ttl, a period of a third of the ttl, hand-off requests of a quarter of the target share (at least 4) per period, a hand-off
/// timeout of the ttl, no metadata.
#[derive(Default)]
pub struct accord_fleet_options {
    shards: Option<i64>,
    keys: Option<Vec<String>>,
    ttl: Option<Duration>,
    period: Option<Duration>,
    max_handoffs_per_period: Option<i64>,
    handoff_timeout: Option<Duration>,
    metadata: Option<accord_core::Metadata>,
}

impl accord_fleet_options {
    /// The core's options; every value is judged by the core (`InvalidArgument` naming it).
    fn to_core(&self) -> Result<FleetOptions, Error> {
        let mut o = match (&self.keys, self.shards) {
            (Some(_), Some(_)) => {
                return Err(invalid("keys", "and shards are both set: set one of them"))
            }
            (Some(keys), None) => FleetOptions::keys(keys.iter().cloned()),
            (None, shards) => {
                FleetOptions::shards(accord_core::limits::shards(shards.unwrap_or(0))?)
            }
        };
        if let Some(ttl) = self.ttl {
            o = o.ttl(ttl);
        }
        if let Some(period) = self.period {
            o = o.period(period);
        }
        if let Some(n) = self.max_handoffs_per_period {
            o = o.max_handoffs_per_period(accord_core::limits::handoffs_per_period(n)?);
        }
        if let Some(t) = self.handoff_timeout {
            o = o.handoff_timeout(t);
        }
        if let Some(m) = &self.metadata {
            o = o.metadata(m.clone());
        }
        Ok(o)
    }
}

/// Applies `change` to the fleet options behind `options`, checking `options` is not NULL.
fn set(
    options: *mut accord_fleet_options,
    err: *mut *mut accord_error,
    change: impl FnOnce(&mut accord_fleet_options) -> Result<(), Error>,
) -> accord_status {
    run(err, || {
        // SAFETY: a non-NULL options pointer was created by accord and not freed, by contract.
        let options =
            unsafe { options.as_mut() }.ok_or_else(|| invalid("options", "must not be NULL"))?;
        change(options)
    })
}

/// New fleet options without shards (set them before use). Free with
/// accord_fleet_options_free().
#[no_mangle]
pub extern "C" fn accord_fleet_options_new() -> *mut accord_fleet_options {
    Box::into_raw(Box::default())
}

/// Frees fleet options. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_fleet_options_free(object: *mut accord_fleet_options) {
    free_box(object)
}

/// `n` shards, named "0" to "n-1" (1 ..= 10000, checked by accord_client_fleet()).
#[no_mangle]
pub extern "C" fn accord_fleet_options_set_shards(
    options: *mut accord_fleet_options,
    n: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.shards = Some(n);
        Ok(())
    })
}

/// Shards with the names `keys[0..n_keys]` (1 ..= 10000 distinct non-empty names, checked by
/// accord_client_fleet()); the strings are copied.
#[no_mangle]
pub extern "C" fn accord_fleet_options_set_keys(
    options: *mut accord_fleet_options,
    keys: *const *const c_char,
    n_keys: usize,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        if keys.is_null() && n_keys > 0 {
            return Err(invalid("keys", "must not be NULL"));
        }
        let keys: Vec<String> = (0..n_keys)
            // SAFETY: `keys` points to `n_keys` string pointers, by contract.
            .map(|i| text(&format!("keys[{i}]"), unsafe { *keys.add(i) }).map(str::to_string))
            .collect::<Result<_, _>>()?;
        o.keys = Some(keys);
        Ok(())
    })
}

/// The ttl of the member and shard leases in milliseconds (default: the client's; 100 ..=
/// 86400000; refused here otherwise, naming ttl and the value given). A member that dies loses
/// its shards this long after its last renewal.
#[no_mangle]
pub extern "C" fn accord_fleet_options_set_ttl_ms(
    options: *mut accord_fleet_options,
    ttl_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.ttl = Some(accord_core::limits::ttl_millis("ttl", ttl_ms)?);
        Ok(())
    })
}

/// How often the member reads the fleet and rebalances, in milliseconds (default: a third of
/// the ttl; 10 ..= the ttl).
#[no_mangle]
pub extern "C" fn accord_fleet_options_set_period_ms(
    options: *mut accord_fleet_options,
    period_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.period = Some(crate::options::duration_ms("period", period_ms)?);
        Ok(())
    })
}

/// The most hand-offs this member asks for in one period (default: a quarter of the target share, at least 4; 1 ..= 1000).
#[no_mangle]
pub extern "C" fn accord_fleet_options_set_max_handoffs_per_period(
    options: *mut accord_fleet_options,
    n: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.max_handoffs_per_period = Some(n);
        Ok(())
    })
}

/// How long a holder asked for a shard waits for its user to finish with it (the next
/// accord_fleet_next_event()) before releasing it anyway, in milliseconds (default: the ttl;
/// up to 86400000).
#[no_mangle]
pub extern "C" fn accord_fleet_options_set_handoff_timeout_ms(
    options: *mut accord_fleet_options,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.handoff_timeout = Some(crate::options::duration_ms("handoff_timeout", timeout_ms)?);
        Ok(())
    })
}

/// This member's metadata in the fleet's membership: a JSON object; NULL clears it.
#[no_mangle]
pub extern "C" fn accord_fleet_options_set_metadata_json(
    options: *mut accord_fleet_options,
    metadata_json: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.metadata = metadata("metadata_json", metadata_json)?;
        Ok(())
    })
}

/// A member of a fleet, balancing its shards in the background. Every function taking a fleet
/// may be called from any thread, concurrently, until accord_fleet_free(); its events are meant
/// for one reader thread. Its shards' leases report their loss to the client's event queue too.
pub struct accord_fleet {
    fleet: Fleet,
    name: CString,
    events: mpsc::UnboundedSender<accord_client_event>,
}

/// Joins the fleet `name` with `options` (required: its shards) and starts balancing its shards
/// in the background (docs/semantics.md, "Membership and fleets"). On success `*out_fleet` is a
/// fleet to read with accord_fleet_next_event() and free with accord_fleet_free(). Blocks.
#[no_mangle]
pub extern "C" fn accord_client_fleet(
    client: *const accord_client,
    name: *const c_char,
    options: *const accord_fleet_options,
    out_fleet: *mut *mut accord_fleet,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let name = text("name", name)?;
        let options = handle("options", options)?.to_core()?;
        let out_fleet = out("out_fleet", out_fleet)?;
        *out_fleet = std::ptr::null_mut();
        let fleet = block_on(c.client.fleet(name, options))?;
        *out_fleet = Box::into_raw(Box::new(accord_fleet {
            name: c_string(fleet.name()),
            fleet,
            events: c.events.clone(),
        }));
        Ok(())
    })
}

/// The fleet's name; owned by the fleet (NULL for NULL).
#[no_mangle]
pub extern "C" fn accord_fleet_name(fleet: *const accord_fleet) -> *const c_char {
    run_or(std::ptr::null(), || {
        // SAFETY: NULL or a live fleet, by contract.
        unsafe { fleet.as_ref() }.map_or(std::ptr::null(), |f| f.name.as_ptr())
    })
}

/// Whether the fleet stopped (closed, or its client closed).
#[no_mangle]
pub extern "C" fn accord_fleet_is_closed(fleet: *const accord_fleet) -> bool {
    run_or(false, || {
        // SAFETY: NULL or a live fleet, by contract.
        unsafe { fleet.as_ref() }.is_some_and(|f| f.fleet.is_closed())
    })
}

/// The shards this member holds now, in name order: `*out_shards` is an array of `*out_n`
/// strings (NULL and 0 when none), freed with accord_string_array_free(). Never blocks.
#[no_mangle]
pub extern "C" fn accord_fleet_shards(
    fleet: *const accord_fleet,
    out_shards: *mut *mut *mut c_char,
    out_n: *mut usize,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let f = handle("fleet", fleet)?;
        let out_shards = out("out_shards", out_shards)?;
        *out_shards = std::ptr::null_mut();
        let out_n = out("out_n", out_n)?;
        *out_n = 0;
        let shards = f.fleet.shards();
        if shards.is_empty() {
            return Ok(());
        }
        let array: Box<[*mut c_char]> = shards.iter().map(|s| c_string(s).into_raw()).collect();
        *out_n = array.len();
        *out_shards = Box::into_raw(array).cast();
        Ok(())
    })
}

/// Frees an array of `n` strings that accord returned (pass the count it came with) and the
/// strings in it. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_string_array_free(strings: *mut *mut c_char, n: usize) {
    run_or((), || {
        if !strings.is_null() {
            // SAFETY: a boxed slice of `n` strings made by accord, freed once, by contract.
            let array = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(strings, n)) };
            for s in array.iter() {
                crate::ffi::accord_string_free(*s);
            }
        }
    })
}

/// The fleet's live members, oldest first, in one read: `*out_members` is an array of
/// `*out_n` members, freed with accord_member_info_array_free(). Blocks for one round trip.
#[no_mangle]
pub extern "C" fn accord_fleet_members(
    fleet: *const accord_fleet,
    out_members: *mut *mut accord_member_info,
    out_n: *mut usize,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let f = handle("fleet", fleet)?;
        let out_members = out("out_members", out_members)?;
        *out_members = std::ptr::null_mut();
        let out_n = out("out_n", out_n)?;
        *out_n = 0;
        let members = block_on(f.fleet.members())?;
        (*out_members, *out_n) = member_array(&members);
        Ok(())
    })
}

/// What a fleet event is.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_fleet_event_kind {
    /// This member now holds `shard`: `lease` is set.
    ACCORD_FLEET_EVENT_ASSIGNED = 1,
    /// This member no longer holds `shard` (for a hand-off: will not once the next event is
    /// asked for, or the hand-off timeout passes): `reason` is set.
    ACCORD_FLEET_EVENT_REVOKED = 2,
}

/// Why a shard was revoked.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_revoke_reason {
    /// Not a Revoked event.
    ACCORD_REVOKE_NONE = 0,
    /// Another member asked for it: do the hand-off's work (a checkpoint), then ask for the next
    /// event, which releases it.
    ACCORD_REVOKE_HANDOFF = 1,
    /// Its lease was lost (not renewed in time): someone else may get it after its expiry.
    ACCORD_REVOKE_LOST = 2,
    /// The fleet or its client was closed; it was given back.
    ACCORD_REVOKE_CLOSED = 3,
}

/// A shard's lease as the fleet's user sees it: its fence and its status. The fleet holds,
/// renews and releases the lease itself. Owned by the event it came in.
pub struct accord_shard_lease {
    lease: ShardLease,
    shard: CString,
    key: CString,
}

/// One event of a fleet, in order per shard: Assigned, then Revoked, then perhaps Assigned again.
/// Free with accord_fleet_event_free().
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct accord_fleet_event {
    /// What happened.
    pub kind: accord_fleet_event_kind,
    /// The shard, NUL-terminated; owned by the event.
    pub shard: *const c_char,
    /// The fence of the grant assigned or revoked.
    pub fence: i64,
    /// Why it was revoked (ACCORD_REVOKE_NONE for Assigned).
    pub reason: accord_revoke_reason,
    /// The name of the reason, "handoff", "lost" or "closed" (static storage); NULL for
    /// Assigned.
    pub reason_name: *const c_char,
    /// The shard's lease (Assigned only; NULL for Revoked); owned by the event.
    pub lease: *const accord_shard_lease,
}

impl accord_fleet_event {
    fn create(
        event: FleetEvent,
        events: &mpsc::UnboundedSender<accord_client_event>,
    ) -> Result<Self, Error> {
        Ok(match event {
            FleetEvent::Assigned { shard, lease } => {
                report_loss(events, lease.lost_signal(), lease.fence());
                accord_fleet_event {
                    kind: accord_fleet_event_kind::ACCORD_FLEET_EVENT_ASSIGNED,
                    shard: c_string(&shard).into_raw(),
                    fence: lease.fence(),
                    reason: accord_revoke_reason::ACCORD_REVOKE_NONE,
                    reason_name: std::ptr::null(),
                    lease: Box::into_raw(Box::new(accord_shard_lease {
                        shard: c_string(lease.shard()),
                        key: c_string(lease.key()),
                        lease,
                    })),
                }
            }
            FleetEvent::Revoked {
                shard,
                reason,
                fence,
            } => accord_fleet_event {
                kind: accord_fleet_event_kind::ACCORD_FLEET_EVENT_REVOKED,
                shard: c_string(&shard).into_raw(),
                fence,
                reason: match reason {
                    RevokeReason::Handoff => accord_revoke_reason::ACCORD_REVOKE_HANDOFF,
                    RevokeReason::Lost => accord_revoke_reason::ACCORD_REVOKE_LOST,
                    RevokeReason::Closed => accord_revoke_reason::ACCORD_REVOKE_CLOSED,
                    other => {
                        return Err(Error::internal(format!(
                            "a revoke reason this library does not know: {other}"
                        )))
                    }
                },
                reason_name: static_c_str(reason.as_str()),
                lease: std::ptr::null(),
            },
            other => {
                return Err(Error::internal(format!(
                    "a fleet event this library does not know: {other:?}"
                )))
            }
        })
    }
}

/// Waits up to `timeout_ms` (negative: without limit; 0: only what is queued) for the fleet's
/// next event. Asking for it acknowledges the previous one: a shard revoked for a hand-off is
/// released now (or at the hand-off timeout, whichever comes first), so do the hand-off's work
/// before calling again. ACCORD_OK with `*out_event` set (free it with
/// accord_fleet_event_free()); ACCORD_TIMEOUT if none came; ACCORD_CANCELLED when `cancel` (may
/// be NULL) fires; ACCORD_CLOSED once the fleet is closed and every event was read. Blocks.
#[no_mangle]
pub extern "C" fn accord_fleet_next_event(
    fleet: *const accord_fleet,
    timeout_ms: i64,
    cancel: *const accord_cancel_token,
    out_event: *mut *mut accord_fleet_event,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let f = handle("fleet", fleet)?;
        let out_event = out("out_event", out_event)?;
        *out_event = std::ptr::null_mut();
        // SAFETY: NULL or a live token, by contract.
        let cancel = unsafe { cancel.as_ref() }.map(|t| t.0.clone());
        let event = block_on(async {
            tokio::select! {
                biased;
                event = f.fleet.next_event() => Ok(event),
                _ = cancelled(cancel.as_ref()) => Err(Error::cancelled("the wait for a fleet event")),
                _ = elapse(timeout_ms) => Err(Error::new(ErrorKind::Timeout, "no fleet event within the timeout")),
            }
        })?;
        let event = event.ok_or_else(|| {
            Error::new(
                ErrorKind::Closed,
                format!("the fleet {:?} is closed", f.fleet.name()),
            )
        })?;
        *out_event = Box::into_raw(Box::new(accord_fleet_event::create(event, &f.events)?));
        Ok(())
    })
}

/// Frees a fleet event and what it holds (its shard lease included). NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_fleet_event_free(event: *mut accord_fleet_event) {
    run_or((), || {
        if let Some(event) = crate::ffi::take_box(event) {
            crate::ffi::accord_string_free(event.shard as *mut c_char);
            free_box(event.lease as *mut accord_shard_lease);
        }
    })
}

fn shard_lease_or_null<'a>(lease: *const accord_shard_lease) -> Option<&'a accord_shard_lease> {
    // SAFETY: NULL or a live shard lease, by contract.
    unsafe { lease.as_ref() }
}

/// The shard; owned by the shard lease (NULL for NULL).
#[no_mangle]
pub extern "C" fn accord_shard_lease_shard(lease: *const accord_shard_lease) -> *const c_char {
    run_or(std::ptr::null(), || {
        shard_lease_or_null(lease).map_or(std::ptr::null(), |l| l.shard.as_ptr())
    })
}

/// The key of the shard's lease (`accord.fleet/<name>/s/<shard>`); owned by the shard lease.
#[no_mangle]
pub extern "C" fn accord_shard_lease_key(lease: *const accord_shard_lease) -> *const c_char {
    run_or(std::ptr::null(), || {
        shard_lease_or_null(lease).map_or(std::ptr::null(), |l| l.key.as_ptr())
    })
}

/// The fence of this grant of the shard: pass it to the resources you write (0 for NULL).
#[no_mangle]
pub extern "C" fn accord_shard_lease_fence(lease: *const accord_shard_lease) -> i64 {
    run_or(0, || {
        shard_lease_or_null(lease).map_or(0, |l| l.lease.fence())
    })
}

/// Whether the shard's lease is lost.
#[no_mangle]
pub extern "C" fn accord_shard_lease_is_lost(lease: *const accord_shard_lease) -> bool {
    run_or(false, || {
        shard_lease_or_null(lease).is_some_and(|l| l.lease.is_lost())
    })
}

/// The status of the shard's lease (RELEASED once the fleet gave it back).
#[no_mangle]
pub extern "C" fn accord_shard_lease_status(
    lease: *const accord_shard_lease,
) -> accord_lease_status_code {
    run_or(
        accord_lease_status_code::ACCORD_LEASE_STATUS_UNKNOWN,
        || {
            shard_lease_or_null(lease)
                .map_or(accord_lease_status_code::ACCORD_LEASE_STATUS_UNKNOWN, |l| {
                    status_code(l.lease.status())
                })
        },
    )
}

/// Waits up to `timeout_ms` (negative: without limit) for the shard's lease to be lost:
/// ACCORD_OK once lost, ACCORD_TIMEOUT if not (a shard given back is never lost),
/// ACCORD_CLOSED if its client was closed. Blocks.
#[no_mangle]
pub extern "C" fn accord_shard_lease_wait_lost(
    lease: *const accord_shard_lease,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("lease", lease)?;
        wait_lost(&l.lease.lost_signal(), timeout_ms, "the shard's lease")
    })
}

/// Closes the fleet: every shard held yields Revoked with ACCORD_REVOKE_CLOSED (read them with
/// accord_fleet_next_event(), which then returns ACCORD_CLOSED) and is given back, so that the
/// other members take it at their next period; the membership is left. Blocks until done.
/// Idempotent; NULL is ignored. The handle stays valid until freed.
#[no_mangle]
pub extern "C" fn accord_fleet_close(fleet: *const accord_fleet) {
    run_or((), || {
        // SAFETY: NULL or a live fleet, by contract.
        if let Some(f) = unsafe { fleet.as_ref() } {
            block_on(f.fleet.close());
        }
    })
}

/// Frees the fleet handle; a fleet not closed closes in the background. No other thread may use
/// the handle during or after this call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_fleet_free(fleet: *mut accord_fleet) {
    run_or((), || {
        if let Some(boxed) = crate::ffi::take_box(fleet) {
            let runtime = crate::runtime::runtime();
            let _context = runtime.enter();
            drop(boxed);
        }
    })
}
