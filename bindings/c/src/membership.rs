//! Membership of a group: join (a member handle holding its lease), the members of a group, and
//! a watch of them (the members once, then Joined, Left and Updated), read pull-style.

use std::ffi::{c_char, CString};
use std::time::Duration;

use accord_core::{
    CancellationToken, Error, ErrorKind, JoinOptions, LeaseStatus, LostReason, LostSignal, Member,
    MemberEvent, MemberInfo, MemberWatch,
};
use tokio::sync::mpsc;

use crate::client::{accord_client, accord_client_event};
use crate::error::{accord_error, accord_status, run, run_or};
use crate::ffi::{c_string, handle, json, metadata, out, text};
use crate::lease::{accord_lease_status_code, report_loss, status_code};
use crate::options::accord_cancel_token;
use crate::runtime::{block_on, elapse};

/// A member of a group: a lease on `accord.group/<group>/<owner>`, renewed with the client's
/// other leases. Every function taking a member may be called from any thread, concurrently,
/// until accord_member_free(). Its loss is reported to the client's event queue, like a lease's.
pub struct accord_member {
    /// `None` once left.
    member: tokio::sync::RwLock<Option<Member>>,
    group: CString,
    key: CString,
    fence: i64,
    signal: LostSignal,
}

/// One member of a group. Strings are owned by the array or event it came in.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct accord_member_info {
    /// The member's owner (its client's owner).
    pub owner: *const c_char,
    /// The member's metadata, a JSON object.
    pub metadata_json: *const c_char,
    /// When it joined, in ms since the Unix epoch (the coordinator's clock).
    pub since_ms: i64,
    /// The fence of its member lease: a member that left and joined again has a new one.
    pub fence: i64,
    /// When its member lease expires unless renewed, in ms since the Unix epoch; 0 if unknown.
    pub expires_at_ms: i64,
}

impl accord_member_info {
    fn create(info: &MemberInfo) -> Self {
        accord_member_info {
            owner: c_string(&info.owner).into_raw(),
            metadata_json: json(&info.metadata).into_raw(),
            since_ms: info.since.timestamp_millis(),
            fence: info.fence,
            expires_at_ms: info.expires_at.map_or(0, |t| t.timestamp_millis()),
        }
    }

    fn free_strings(&self) {
        for s in [self.owner, self.metadata_json] {
            crate::ffi::accord_string_free(s as *mut c_char);
        }
    }
}

/// A boxed array of member infos for C: (pointer, count); NULL and 0 when empty.
pub(crate) fn member_array(infos: &[MemberInfo]) -> (*mut accord_member_info, usize) {
    if infos.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let array: Box<[accord_member_info]> = infos.iter().map(accord_member_info::create).collect();
    let n = array.len();
    (Box::into_raw(array).cast(), n)
}

fn free_member_array(members: *mut accord_member_info, n: usize) {
    if members.is_null() {
        return;
    }
    // SAFETY: made by member_array() from a boxed slice of `n` infos, freed once, by contract.
    let array = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(members, n)) };
    for info in array.iter() {
        info.free_strings();
    }
}

/// Waits up to `timeout_ms` for the lease behind `signal` to be lost: Ok once lost, `Timeout`
/// if not within the time, `Closed` if its client was closed.
pub(crate) fn wait_lost(signal: &LostSignal, timeout_ms: i64, what: &str) -> Result<(), Error> {
    block_on(async {
        tokio::select! {
            biased;
            _ = signal.wait() => Ok(()),
            _ = elapse(timeout_ms) => Err(Error::new(ErrorKind::Timeout, format!("{what} was not lost within the timeout"))),
        }
    })?;
    match signal.status() {
        LeaseStatus::Lost(LostReason::ClientClosed) => Err(Error::closed()),
        _ => Ok(()),
    }
}

/// A ttl in milliseconds where 0 means "the client's" (None); otherwise the core's range, its
/// message naming the value given.
fn optional_ttl_ms(ms: i64) -> Result<Option<Duration>, Error> {
    (ms != 0)
        .then(|| accord_core::limits::ttl_millis("ttl", ms))
        .transpose()
}

/// Joins `group` as this client's owner: `metadata_json` (a JSON object, or NULL) is what other
/// members see of this one; `ttl_ms` is the member lease's ttl (0: the client's; 100 ..=
/// 86400000). One membership per owner and group: while this owner is a member already, it
/// waits up to the ttl for that membership to end (then ACCORD_TIMEOUT). On success
/// `*out_member` is a member to free with accord_member_free() (which leaves the group in the
/// background). Blocks.
#[no_mangle]
pub extern "C" fn accord_client_join(
    client: *const accord_client,
    group: *const c_char,
    metadata_json: *const c_char,
    ttl_ms: i64,
    out_member: *mut *mut accord_member,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let group = text("group", group)?;
        let out_member = out("out_member", out_member)?;
        *out_member = std::ptr::null_mut();
        let mut options = JoinOptions::new();
        if let Some(m) = metadata("metadata_json", metadata_json)? {
            options = options.metadata(m);
        }
        if let Some(ttl) = optional_ttl_ms(ttl_ms)? {
            options = options.ttl(ttl);
        }
        let member = block_on(c.client.join(group, options))?;
        *out_member = accord_member::create(&c.events, member);
        Ok(())
    })
}

impl accord_member {
    fn create(
        events: &mpsc::UnboundedSender<accord_client_event>,
        member: Member,
    ) -> *mut accord_member {
        let lease = member.lease();
        report_loss(events, member.lost_signal(), lease.fence());
        Box::into_raw(Box::new(accord_member {
            group: c_string(member.group()),
            key: c_string(lease.key()),
            fence: lease.fence(),
            signal: member.lost_signal(),
            member: tokio::sync::RwLock::new(Some(member)),
        }))
    }

    fn left(&self) -> Error {
        Error::new(
            ErrorKind::LeaseLost,
            format!(
                "the member of group {:?} has left",
                self.group.to_string_lossy()
            ),
        )
    }
}

fn member_or_null<'a>(member: *const accord_member) -> Option<&'a accord_member> {
    // SAFETY: NULL or a live member, by contract.
    unsafe { member.as_ref() }
}

/// The group joined; owned by the member (NULL for NULL).
#[no_mangle]
pub extern "C" fn accord_member_group(member: *const accord_member) -> *const c_char {
    run_or(std::ptr::null(), || {
        member_or_null(member).map_or(std::ptr::null(), |m| m.group.as_ptr())
    })
}

/// The key of the member's lease (`accord.group/<group>/<owner>`); owned by the member.
#[no_mangle]
pub extern "C" fn accord_member_key(member: *const accord_member) -> *const c_char {
    run_or(std::ptr::null(), || {
        member_or_null(member).map_or(std::ptr::null(), |m| m.key.as_ptr())
    })
}

/// The fence of the member's lease (0 for NULL).
#[no_mangle]
pub extern "C" fn accord_member_fence(member: *const accord_member) -> i64 {
    run_or(0, || member_or_null(member).map_or(0, |m| m.fence))
}

/// Whether the membership is lost (not renewed in time, or the client closed).
#[no_mangle]
pub extern "C" fn accord_member_is_lost(member: *const accord_member) -> bool {
    run_or(false, || {
        member_or_null(member).is_some_and(|m| m.signal.fired())
    })
}

/// The status of the member's lease (ACCORD_LEASE_STATUS_RELEASED once left).
#[no_mangle]
pub extern "C" fn accord_member_status(member: *const accord_member) -> accord_lease_status_code {
    run_or(
        accord_lease_status_code::ACCORD_LEASE_STATUS_UNKNOWN,
        || {
            member_or_null(member)
                .map_or(accord_lease_status_code::ACCORD_LEASE_STATUS_UNKNOWN, |m| {
                    status_code(m.signal.status())
                })
        },
    )
}

/// Waits up to `timeout_ms` (negative: without limit) for the membership to be lost: ACCORD_OK
/// once lost, ACCORD_TIMEOUT if not (a member that left is never lost), ACCORD_CLOSED if its
/// client was closed. Blocks.
#[no_mangle]
pub extern "C" fn accord_member_wait_lost(
    member: *const accord_member,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let m = handle("member", member)?;
        wait_lost(&m.signal, timeout_ms, "the membership")
    })
}

/// Replaces the member's metadata (a JSON object; NULL: `{}`), renewing its lease; watchers
/// see ACCORD_MEMBER_EVENT_UPDATED, accord_client_members() shows it. After the member left:
/// ACCORD_LEASE_LOST. Blocks.
#[no_mangle]
pub extern "C" fn accord_member_update_metadata(
    member: *const accord_member,
    metadata_json: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let m = handle("member", member)?;
        let metadata = metadata("metadata_json", metadata_json)?.unwrap_or_default();
        block_on(async {
            let guard = m.member.read().await;
            match guard.as_ref() {
                Some(member) => member.update_metadata(metadata).await,
                None => Err(m.left()),
            }
        })
    })
}

/// Leaves the group now: watchers see Left. ACCORD_LEASE_LOST if the membership was already
/// lost; leaving again is harmless. The handle stays valid until freed. Blocks.
#[no_mangle]
pub extern "C" fn accord_member_leave(
    member: *const accord_member,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let m = handle("member", member)?;
        block_on(async {
            let taken = m.member.write().await.take();
            match taken {
                Some(member) => member.leave().await,
                None => Ok(()),
            }
        })
    })
}

/// Frees the member handle; a member that has not left leaves in the background. No other
/// thread may use the handle during or after this call. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_member_free(member: *mut accord_member) {
    run_or((), || {
        if let Some(boxed) = crate::ffi::take_box(member) {
            // Leaving in the background spawns on the runtime.
            let runtime = crate::runtime::runtime();
            let _context = runtime.enter();
            drop(boxed);
        }
    })
}

/// The live members of `group`, oldest first, in one read. On ACCORD_OK `*out_members` is an
/// array of `*out_n` members (NULL and 0 when there are none), freed with
/// accord_member_info_array_free(). Blocks for one round trip.
#[no_mangle]
pub extern "C" fn accord_client_members(
    client: *const accord_client,
    group: *const c_char,
    out_members: *mut *mut accord_member_info,
    out_n: *mut usize,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let group = text("group", group)?;
        let out_members = out("out_members", out_members)?;
        *out_members = std::ptr::null_mut();
        let out_n = out("out_n", out_n)?;
        *out_n = 0;
        let members = block_on(c.client.members(group))?;
        (*out_members, *out_n) = member_array(&members);
        Ok(())
    })
}

/// Frees an array of `n` members (pass the count it came with) and its strings. NULL is
/// accepted.
#[no_mangle]
pub extern "C" fn accord_member_info_array_free(members: *mut accord_member_info, n: usize) {
    run_or((), || free_member_array(members, n))
}

/// A watch of a group's members. accord_member_watch_next() may block in one thread while
/// accord_member_watch_close() is called from another; free only after every call on it has
/// returned.
pub struct accord_member_watch {
    watch: tokio::sync::Mutex<MemberWatch>,
    closed: CancellationToken,
}

/// What a member event is.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_member_event_kind {
    /// The members when the watch started (the first event only; may be none).
    ACCORD_MEMBER_EVENT_MEMBERS = 1,
    /// A member joined: `members[0]`.
    ACCORD_MEMBER_EVENT_JOINED = 2,
    /// A member left (it left, its client closed, or its lease expired): `members[0]`.
    ACCORD_MEMBER_EVENT_LEFT = 3,
    /// A member replaced its metadata: `members[0]`, as it is now (updates between two reads
    /// of the watch come as one, with the latest metadata).
    ACCORD_MEMBER_EVENT_UPDATED = 4,
}

/// One event of a watch. Free with accord_member_event_free().
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct accord_member_event {
    /// What happened.
    pub kind: accord_member_event_kind,
    /// The members concerned (owned by the event; NULL when `n_members` is 0).
    pub members: *mut accord_member_info,
    /// How many: any number for ACCORD_MEMBER_EVENT_MEMBERS, 1 otherwise.
    pub n_members: usize,
}

/// Watches `group`: the members now, then every Joined, Left and Updated in order. Listens before it
/// returns, so that no change from then on is missed. On success `*out_watch` is a watch to read
/// with accord_member_watch_next() and free with accord_member_watch_free(). Blocks.
#[no_mangle]
pub extern "C" fn accord_client_watch(
    client: *const accord_client,
    group: *const c_char,
    out_watch: *mut *mut accord_member_watch,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let group = text("group", group)?;
        let out_watch = out("out_watch", out_watch)?;
        *out_watch = std::ptr::null_mut();
        let watch = block_on(c.client.watch(group))?;
        *out_watch = Box::into_raw(Box::new(accord_member_watch {
            watch: tokio::sync::Mutex::new(watch),
            closed: CancellationToken::new(),
        }));
        Ok(())
    })
}

/// Waits up to `timeout_ms` (negative: without limit; 0: only what is known) for the next
/// event: the members first (ACCORD_MEMBER_EVENT_MEMBERS), then Joined, Left and Updated. ACCORD_OK with `*out_event` set (free it
/// with accord_member_event_free()); ACCORD_TIMEOUT if none came; ACCORD_CANCELLED when
/// `cancel` (may be NULL) fires; ACCORD_CLOSED once the watch or its client is closed. Meant for
/// one reader thread per watch.
#[no_mangle]
pub extern "C" fn accord_member_watch_next(
    watch: *const accord_member_watch,
    timeout_ms: i64,
    cancel: *const accord_cancel_token,
    out_event: *mut *mut accord_member_event,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let w = handle("watch", watch)?;
        let out_event = out("out_event", out_event)?;
        *out_event = std::ptr::null_mut();
        // SAFETY: NULL or a live token, by contract.
        let cancel = unsafe { cancel.as_ref() }.map(|t| t.0.clone());
        let event = block_on(async {
            let watch_closed = || Error::new(ErrorKind::Closed, "the watch is closed");
            if w.closed.is_cancelled() {
                return Err(watch_closed());
            }
            let mut watch = w.watch.lock().await;
            tokio::select! {
                biased;
                _ = w.closed.cancelled() => Err(watch_closed()),
                _ = cancelled(cancel.as_ref()) => Err(Error::cancelled("the wait for a member event")),
                event = watch.next() => event,
                _ = elapse(timeout_ms) => Err(Error::new(ErrorKind::Timeout, "no member event within the timeout")),
            }
        })?;
        let (kind, infos) = match event {
            MemberEvent::Members(all) => {
                (accord_member_event_kind::ACCORD_MEMBER_EVENT_MEMBERS, all)
            }
            MemberEvent::Joined(one) => (
                accord_member_event_kind::ACCORD_MEMBER_EVENT_JOINED,
                vec![one],
            ),
            MemberEvent::Left(one) => (
                accord_member_event_kind::ACCORD_MEMBER_EVENT_LEFT,
                vec![one],
            ),
            MemberEvent::Updated(one) => (
                accord_member_event_kind::ACCORD_MEMBER_EVENT_UPDATED,
                vec![one],
            ),
            other => {
                return Err(Error::internal(format!(
                    "a member event this library does not know: {other:?}"
                )))
            }
        };
        let (members, n_members) = member_array(&infos);
        *out_event = Box::into_raw(Box::new(accord_member_event {
            kind,
            members,
            n_members,
        }));
        Ok(())
    })
}

/// Completes when `token` fires; never without one.
pub(crate) async fn cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Frees a member event and what it holds. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_member_event_free(event: *mut accord_member_event) {
    run_or((), || {
        if let Some(event) = crate::ffi::take_box(event) {
            free_member_array(event.members, event.n_members);
        }
    })
}

/// Stops the watch: a blocked accord_member_watch_next() returns ACCORD_CLOSED, and so does
/// every later one. Blocks briefly. Idempotent; NULL is ignored.
#[no_mangle]
pub extern "C" fn accord_member_watch_close(watch: *const accord_member_watch) {
    run_or((), || {
        // SAFETY: NULL or a live watch, by contract.
        if let Some(w) = unsafe { watch.as_ref() } {
            w.closed.cancel();
            block_on(async { w.watch.lock().await.close().await });
        }
    })
}

/// Frees a watch (closing it if needed). No other thread may use it during or after this call.
/// NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_member_watch_free(watch: *mut accord_member_watch) {
    run_or((), || {
        if let Some(boxed) = crate::ffi::take_box(watch) {
            let runtime = crate::runtime::runtime();
            let _context = runtime.enter();
            drop(boxed);
        }
    })
}
