//! Elections: campaign (a leadership handle holding the election's lease), the current leader,
//! and an observer of the leaders, read pull-style like a member watch.

use std::ffi::{c_char, CString};
use std::sync::Mutex;
use std::time::Duration;

use accord_core::{
    CampaignOptions, CancellationToken, Election, Error, ErrorKind, Leader, Leadership, LostSignal,
    Observer,
};
use tokio::sync::mpsc;

use crate::client::{accord_client, accord_client_event};
use crate::error::{accord_error, accord_status, invalid, run, run_or};
use crate::ffi::{c_string, free_box, handle, out, text};
use crate::lease::{accord_lease_status_code, report_loss, status_code};
use crate::membership::{cancelled, wait_lost};
use crate::options::accord_cancel_token;
use crate::runtime::{block_on, elapse};

/// An election of a client: campaign to lead it, read its leader, observe its leaders. Every
/// function taking an election may be called from any thread, concurrently, until
/// accord_election_free(). Leaderships won through it report their loss to the client's event
/// queue, like leases.
pub struct accord_election {
    election: Election,
    name: CString,
    events: mpsc::UnboundedSender<accord_client_event>,
}

/// Opens the election `name` (validated here: ACCORD_INVALID_ARGUMENT naming "election"). Does
/// not touch the coordinator. On success `*out_election` is an election to free with
/// accord_election_free().
#[no_mangle]
pub extern "C" fn accord_client_election(
    client: *const accord_client,
    name: *const c_char,
    out_election: *mut *mut accord_election,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let name = text("election", name)?;
        let out_election = out("out_election", out_election)?;
        *out_election = std::ptr::null_mut();
        let election = c.client.election(name)?;
        *out_election = Box::into_raw(Box::new(accord_election {
            name: c_string(election.name()),
            election,
            events: c.events.clone(),
        }));
        Ok(())
    })
}

/// The election's name; owned by the election (NULL for NULL).
#[no_mangle]
pub extern "C" fn accord_election_name(election: *const accord_election) -> *const c_char {
    run_or(std::ptr::null(), || {
        // SAFETY: NULL or a live election, by contract.
        unsafe { election.as_ref() }.map_or(std::ptr::null(), |e| e.name.as_ptr())
    })
}

/// Frees an election handle (leaderships and observers made from it live on). NULL is
/// accepted.
#[no_mangle]
pub extern "C" fn accord_election_free(election: *mut accord_election) {
    run_or((), || free_box(election))
}

/// Options of accord_election_campaign(). Defaults: the client's ttl, waiting without a time
/// limit.
#[derive(Default)]
pub struct accord_campaign_options {
    ttl: Option<Duration>,
    timeout: Option<Duration>,
}

/// New campaign options with every default. Free with accord_campaign_options_free().
#[no_mangle]
pub extern "C" fn accord_campaign_options_new() -> *mut accord_campaign_options {
    Box::into_raw(Box::default())
}

/// Frees campaign options. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_campaign_options_free(object: *mut accord_campaign_options) {
    free_box(object)
}

fn set(
    options: *mut accord_campaign_options,
    err: *mut *mut accord_error,
    change: impl FnOnce(&mut accord_campaign_options) -> Result<(), Error>,
) -> accord_status {
    run(err, || {
        // SAFETY: a non-NULL options pointer was created by accord and not freed, by contract.
        let options =
            unsafe { options.as_mut() }.ok_or_else(|| invalid("options", "must not be NULL"))?;
        change(options)
    })
}

/// The leadership lease's ttl in milliseconds (100 ..= 86400000; refused here otherwise, with
/// ACCORD_INVALID_ARGUMENT naming ttl and the value given): a leader whose process dies is
/// replaced this long after its last renewal.
#[no_mangle]
pub extern "C" fn accord_campaign_options_set_ttl_ms(
    options: *mut accord_campaign_options,
    ttl_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.ttl = Some(accord_core::limits::ttl_millis("ttl", ttl_ms)?);
        Ok(())
    })
}

/// How long the campaign waits to lead, in milliseconds (then ACCORD_TIMEOUT); negative waits
/// without limit (the default).
#[no_mangle]
pub extern "C" fn accord_campaign_options_set_timeout_ms(
    options: *mut accord_campaign_options,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.timeout = crate::runtime::timeout(timeout_ms);
        Ok(())
    })
}

/// This client leads an election: an ordinary lease on the election's key (fenced, renewed with
/// the client's other leases, its loss reported to the client's event queue). Every function
/// taking a leadership may be called from any thread, concurrently, until
/// accord_leadership_free().
pub struct accord_leadership {
    /// `None` once resigned.
    leadership: tokio::sync::RwLock<Option<Leadership>>,
    key: CString,
    fence: i64,
    signal: LostSignal,
    /// The value as the core last gave it (after the grant, after each proclaim): the accessor
    /// never waits for a proclaim or resign in flight.
    value: Mutex<String>,
}

impl accord_leadership {
    fn create(
        events: &mpsc::UnboundedSender<accord_client_event>,
        leadership: Leadership,
    ) -> *mut accord_leadership {
        let lease = leadership.lease();
        report_loss(events, leadership.lost_signal(), lease.fence());
        Box::into_raw(Box::new(accord_leadership {
            key: c_string(lease.key()),
            fence: lease.fence(),
            signal: leadership.lost_signal(),
            value: Mutex::new(leadership.value()),
            leadership: tokio::sync::RwLock::new(Some(leadership)),
        }))
    }

    fn resigned(&self) -> Error {
        Error::new(
            ErrorKind::LeaseLost,
            format!(
                "the leadership of {:?} was resigned",
                self.key.to_string_lossy()
            ),
        )
    }
}

/// Waits in line to lead (campaigners are granted in arrival order), then leads with `value`
/// (what observers see). `options` (NULL: every default) set the ttl and the timeout (then
/// ACCORD_TIMEOUT); `cancel` (may be NULL) ends the wait with ACCORD_CANCELLED; a closed client
/// gives ACCORD_CLOSED. In each failure nothing is left held and the place in line is given up.
/// On success `*out_leadership` is a leadership to free with accord_leadership_free() (which
/// resigns in the background). Blocks.
#[no_mangle]
pub extern "C" fn accord_election_campaign(
    election: *const accord_election,
    value: *const c_char,
    options: *const accord_campaign_options,
    cancel: *const accord_cancel_token,
    out_leadership: *mut *mut accord_leadership,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let e = handle("election", election)?;
        let value = text("value", value)?;
        let out_leadership = out("out_leadership", out_leadership)?;
        *out_leadership = std::ptr::null_mut();
        let mut o = CampaignOptions::new();
        // SAFETY: NULL or live options, by contract.
        if let Some(options) = unsafe { options.as_ref() } {
            if let Some(ttl) = options.ttl {
                o = o.ttl(ttl);
            }
            if let Some(timeout) = options.timeout {
                o = o.timeout(timeout);
            }
        }
        // SAFETY: NULL or a live token, by contract.
        if let Some(token) = unsafe { cancel.as_ref() } {
            o = o.cancel(token.0.clone());
        }
        let leadership = block_on(e.election.campaign(value, o))?;
        *out_leadership = accord_leadership::create(&e.events, leadership);
        Ok(())
    })
}

fn leadership_or_null<'a>(leadership: *const accord_leadership) -> Option<&'a accord_leadership> {
    // SAFETY: NULL or a live leadership, by contract.
    unsafe { leadership.as_ref() }
}

/// The leadership's fence: pass it to what the leader writes, so that a deposed leader's late
/// writes are refused (0 for NULL).
#[no_mangle]
pub extern "C" fn accord_leadership_fence(leadership: *const accord_leadership) -> i64 {
    run_or(0, || leadership_or_null(leadership).map_or(0, |l| l.fence))
}

/// The key of the leadership's lease (`accord.election/<name>`); owned by the leadership.
#[no_mangle]
pub extern "C" fn accord_leadership_key(leadership: *const accord_leadership) -> *const c_char {
    run_or(std::ptr::null(), || {
        leadership_or_null(leadership).map_or(std::ptr::null(), |l| l.key.as_ptr())
    })
}

/// The value observers see (the campaign's, or the last proclaimed; after a resign, the last
/// one it led with). The caller frees it with accord_string_free(); NULL for NULL.
#[no_mangle]
pub extern "C" fn accord_leadership_value(leadership: *const accord_leadership) -> *mut c_char {
    run_or(std::ptr::null_mut(), || {
        leadership_or_null(leadership).map_or(std::ptr::null_mut(), |l| {
            let value = l.value.lock().unwrap_or_else(|e| e.into_inner());
            c_string(&value).into_raw()
        })
    })
}

/// Whether the leadership is lost (expired, or its client closed); never for one resigned.
#[no_mangle]
pub extern "C" fn accord_leadership_is_lost(leadership: *const accord_leadership) -> bool {
    run_or(false, || {
        leadership_or_null(leadership).is_some_and(|l| l.signal.fired())
    })
}

/// The status of the leadership's lease (ACCORD_LEASE_STATUS_RELEASED once resigned).
#[no_mangle]
pub extern "C" fn accord_leadership_status(
    leadership: *const accord_leadership,
) -> accord_lease_status_code {
    run_or(
        accord_lease_status_code::ACCORD_LEASE_STATUS_UNKNOWN,
        || {
            leadership_or_null(leadership)
                .map_or(accord_lease_status_code::ACCORD_LEASE_STATUS_UNKNOWN, |l| {
                    status_code(l.signal.status())
                })
        },
    )
}

/// Waits up to `timeout_ms` (negative: without limit) for the leadership to be lost: ACCORD_OK
/// once lost, ACCORD_TIMEOUT if not (one resigned is never lost), ACCORD_CLOSED if its client
/// was closed. Blocks.
#[no_mangle]
pub extern "C" fn accord_leadership_wait_lost(
    leadership: *const accord_leadership,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("leadership", leadership)?;
        wait_lost(&l.signal, timeout_ms, "the leadership")
    })
}

/// Changes the value observers see, without a new election (the fence stays). After a resign:
/// ACCORD_LEASE_LOST. Blocks.
#[no_mangle]
pub extern "C" fn accord_leadership_proclaim(
    leadership: *const accord_leadership,
    value: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("leadership", leadership)?;
        let value = text("value", value)?;
        block_on(async {
            let guard = l.leadership.read().await;
            let Some(leadership) = guard.as_ref() else {
                return Err(l.resigned());
            };
            let proclaimed = leadership.proclaim(value).await;
            *l.value.lock().unwrap_or_else(|e| e.into_inner()) = leadership.value();
            proclaimed
        })
    })
}

/// Stops leading now: the next campaigner in line leads. ACCORD_LEASE_LOST if the leadership
/// was already lost; resigning again is harmless. The handle stays valid until freed. Blocks.
#[no_mangle]
pub extern "C" fn accord_leadership_resign(
    leadership: *const accord_leadership,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let l = handle("leadership", leadership)?;
        block_on(async {
            let taken = l.leadership.write().await.take();
            match taken {
                Some(leadership) => leadership.resign().await,
                None => Ok(()),
            }
        })
    })
}

/// Frees the leadership handle; a leadership not resigned resigns in the background. No other
/// thread may use the handle during or after this call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_leadership_free(leadership: *mut accord_leadership) {
    run_or((), || {
        if let Some(boxed) = crate::ffi::take_box(leadership) {
            // Resigning in the background spawns on the runtime.
            let runtime = crate::runtime::runtime();
            let _context = runtime.enter();
            drop(boxed);
        }
    })
}

/// The leader of an election as the coordinator records it. Free with accord_leader_free().
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct accord_leader {
    /// The leading client's owner; owned by the leader.
    pub owner: *const c_char,
    /// The value it campaigned with or last proclaimed; owned by the leader.
    pub value: *const c_char,
    /// The leadership's fence: larger for every new leader.
    pub fence: i64,
    /// When this leadership began, in ms since the Unix epoch (the coordinator's clock).
    pub since_ms: i64,
    /// When the leadership expires unless renewed, in ms since the Unix epoch.
    pub expires_at_ms: i64,
}

fn leader_box(leader: &Leader) -> *mut accord_leader {
    Box::into_raw(Box::new(accord_leader {
        owner: c_string(&leader.owner).into_raw(),
        value: c_string(&leader.value).into_raw(),
        fence: leader.fence,
        since_ms: leader.since.timestamp_millis(),
        expires_at_ms: leader.expires_at.timestamp_millis(),
    }))
}

/// Frees a leader and its strings. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_leader_free(leader: *mut accord_leader) {
    run_or((), || {
        if let Some(leader) = crate::ffi::take_box(leader) {
            for s in [leader.owner, leader.value] {
                crate::ffi::accord_string_free(s as *mut c_char);
            }
        }
    })
}

/// The current leader, in one read: ACCORD_OK with `*out_leader` set (free it with
/// accord_leader_free()), or NULL when nobody leads. Blocks for one round trip.
#[no_mangle]
pub extern "C" fn accord_election_leader(
    election: *const accord_election,
    out_leader: *mut *mut accord_leader,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let e = handle("election", election)?;
        let out_leader = out("out_leader", out_leader)?;
        *out_leader = std::ptr::null_mut();
        if let Some(leader) = block_on(e.election.leader())? {
            *out_leader = leader_box(&leader);
        }
        Ok(())
    })
}

/// An observer of an election's leaders. accord_observer_next() may block in one thread while
/// accord_observer_close() is called from another; free only after every call on it has
/// returned.
pub struct accord_observer {
    observer: tokio::sync::Mutex<Observer>,
    closed: CancellationToken,
}

/// Follows the election: the current state (the leader, or a vacancy when nobody leads), then
/// every new leader, every proclaimed value and every vacancy, each once, in order (fences
/// never decrease). Listens before it
/// returns, so that no change from then on is missed. On success `*out_observer` is an observer
/// to read with accord_observer_next() and free with accord_observer_free(). Blocks.
#[no_mangle]
pub extern "C" fn accord_election_observe(
    election: *const accord_election,
    out_observer: *mut *mut accord_observer,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let e = handle("election", election)?;
        let out_observer = out("out_observer", out_observer)?;
        *out_observer = std::ptr::null_mut();
        let observer = block_on(e.election.observe())?;
        *out_observer = Box::into_raw(Box::new(accord_observer {
            observer: tokio::sync::Mutex::new(observer),
            closed: CancellationToken::new(),
        }));
        Ok(())
    })
}

/// Waits up to `timeout_ms` (negative: without limit) for the next change of leadership:
/// ACCORD_OK with `*out_leader` set to the new leader or value (free it with
/// accord_leader_free()), or to NULL for a vacancy (the leader resigned or expired and nobody
/// leads yet; the first call reports NULL when nobody leads); ACCORD_TIMEOUT if nothing changed
/// (a timeout loses nothing: the next call reports what arrived meanwhile);
/// ACCORD_CANCELLED when `cancel` (may be NULL) fires; ACCORD_CLOSED once the observer or its
/// client is closed. Meant for one reader thread per observer. Blocks.
#[no_mangle]
pub extern "C" fn accord_observer_next(
    observer: *const accord_observer,
    timeout_ms: i64,
    cancel: *const accord_cancel_token,
    out_leader: *mut *mut accord_leader,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let o = handle("observer", observer)?;
        let out_leader = out("out_leader", out_leader)?;
        *out_leader = std::ptr::null_mut();
        // SAFETY: NULL or a live token, by contract.
        let cancel = unsafe { cancel.as_ref() }.map(|t| t.0.clone());
        let leader = block_on(async {
            let observer_closed = || Error::new(ErrorKind::Closed, "the observer is closed");
            if o.closed.is_cancelled() {
                return Err(observer_closed());
            }
            let mut observer = o.observer.lock().await;
            tokio::select! {
                biased;
                _ = o.closed.cancelled() => Err(observer_closed()),
                _ = cancelled(cancel.as_ref()) => Err(Error::cancelled("the wait for a leader")),
                leader = observer.next() => leader,
                _ = elapse(timeout_ms) => Err(Error::new(ErrorKind::Timeout, "no change of leader within the timeout")),
            }
        })?;
        if let Some(leader) = leader {
            *out_leader = leader_box(&leader);
        }
        Ok(())
    })
}

/// Stops the observer: a blocked accord_observer_next() returns ACCORD_CLOSED, and so does every
/// later one. Blocks briefly. Idempotent; NULL is ignored.
#[no_mangle]
pub extern "C" fn accord_observer_close(observer: *const accord_observer) {
    run_or((), || {
        // SAFETY: NULL or a live observer, by contract.
        if let Some(o) = unsafe { observer.as_ref() } {
            o.closed.cancel();
            block_on(async { o.observer.lock().await.close().await });
        }
    })
}

/// Frees an observer (closing it if needed). No other thread may use it during or after this
/// call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_observer_free(observer: *mut accord_observer) {
    run_or((), || {
        if let Some(boxed) = crate::ffi::take_box(observer) {
            let runtime = crate::runtime::runtime();
            let _context = runtime.enter();
            drop(boxed);
        }
    })
}
