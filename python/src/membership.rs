//! Membership of groups: `Member` (sync) and `AsyncMember` (asyncio), `MemberWatch` (sync
//! iterator) and `AsyncMemberWatch` (async iterator), and the records they report
//! (`MemberInfo`, and the events `Members`, `Joined`, `Left`, `Updated`). The rules (keys, expiry,
//! wake-ups, what a watch reports) are the core's.

use std::sync::Arc;
use std::time::Duration;

use accord::{ErrorKind, JoinOptions, LeaseStatus};
use chrono::{DateTime, Utc};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};
use tokio::sync::RwLock;

use crate::convert;
use crate::errors::{to_py, IntoPyResult};
use crate::lease::LostSignal;
use crate::runtime::{self, aio, block_on, block_on_settled};
use crate::types::py_str_repr;
use crate::watching::{self, Read, Watching};

/// The options of a `join`.
pub fn join_options(
    metadata: Option<&Bound<'_, PyAny>>,
    ttl: Option<f64>,
) -> PyResult<JoinOptions> {
    let mut options = JoinOptions::new();
    if let Some(metadata) = convert::metadata("metadata", metadata)? {
        options = options.metadata(metadata);
    }
    if let Some(ttl) = convert::ttl("ttl", ttl)? {
        options = options.ttl(ttl);
    }
    Ok(options)
}

/// One member of a group, as `members()` and a watch report it.
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct MemberInfo(accord::MemberInfo);

impl From<accord::MemberInfo> for MemberInfo {
    fn from(info: accord::MemberInfo) -> Self {
        MemberInfo(info)
    }
}

/// A list of the core's members, as Python records.
pub fn infos(members: Vec<accord::MemberInfo>) -> Vec<MemberInfo> {
    members.into_iter().map(MemberInfo).collect()
}

#[pymethods]
impl MemberInfo {
    /// The member's owner (its client's owner).
    #[getter]
    fn owner(&self) -> &str {
        &self.0.owner
    }
    /// The member's metadata, as it last set it.
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        convert::metadata_to_py(py, &self.0.metadata)
    }
    /// When it joined, by the coordinator's clock (timezone-aware, UTC).
    #[getter]
    fn since(&self) -> DateTime<Utc> {
        self.0.since
    }
    /// The fence of its member lease: a member that left and joined again has a new one.
    #[getter]
    fn fence(&self) -> i64 {
        self.0.fence
    }
    /// When its member lease expires unless renewed (the coordinator's clock).
    #[getter]
    fn expires_at(&self) -> Option<DateTime<Utc>> {
        self.0.expires_at
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let metadata = self.metadata(py)?.repr()?;
        Ok(format!(
            "MemberInfo(owner={}, fence={}, metadata={metadata})",
            py_str_repr(&self.0.owner),
            self.0.fence,
        ))
    }
}

/// The members of the group when the watch started (a watch's first event).
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct Members {
    #[pyo3(get)]
    members: Vec<MemberInfo>,
}

#[pymethods]
impl Members {
    #[classattr]
    fn __match_args__() -> (&'static str,) {
        ("members",)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let members = self
            .members
            .iter()
            .map(|m| m.__repr__(py))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(format!("Members([{}])", members.join(", ")))
    }
}

/// A member joined the group.
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct Joined {
    #[pyo3(get)]
    member: MemberInfo,
}

/// A member left the group: it left, its client closed, or its lease expired.
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct Left {
    #[pyo3(get)]
    member: MemberInfo,
}

/// A member replaced its metadata (`update_metadata`): the member as it is now. Updates made
/// between two reads of the watch come as one, with the latest metadata.
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct Updated {
    #[pyo3(get)]
    member: MemberInfo,
}

#[pymethods]
impl Joined {
    #[classattr]
    fn __match_args__() -> (&'static str,) {
        ("member",)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Joined({})", self.member.__repr__(py)?))
    }
}

#[pymethods]
impl Left {
    #[classattr]
    fn __match_args__() -> (&'static str,) {
        ("member",)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Left({})", self.member.__repr__(py)?))
    }
}

#[pymethods]
impl Updated {
    #[classattr]
    fn __match_args__() -> (&'static str,) {
        ("member",)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Updated({})", self.member.__repr__(py)?))
    }
}

/// What a watch yields, on its way to Python.
#[derive(IntoPyObject)]
pub enum MemberEvent {
    Members(Members),
    Joined(Joined),
    Left(Left),
    Updated(Updated),
}

impl TryFrom<accord::MemberEvent> for MemberEvent {
    type Error = PyErr;
    fn try_from(event: accord::MemberEvent) -> PyResult<Self> {
        Ok(match event {
            accord::MemberEvent::Members(members) => MemberEvent::Members(Members {
                members: infos(members),
            }),
            accord::MemberEvent::Joined(info) => MemberEvent::Joined(Joined {
                member: info.into(),
            }),
            accord::MemberEvent::Left(info) => MemberEvent::Left(Left {
                member: info.into(),
            }),
            accord::MemberEvent::Updated(info) => MemberEvent::Updated(Updated {
                member: info.into(),
            }),
            other => {
                return Err(to_py(accord::Error::internal(format!(
                    "a member event this binding does not know: {other:?}"
                ))))
            }
        })
    }
}

/// What both member classes hold: the core's member until it leaves, and what stays readable
/// after.
struct Joining {
    member: Arc<RwLock<Option<accord::Member>>>,
    group: String,
    key: String,
    fence: i64,
    owner: String,
    ttl: Duration,
    signal: accord::LostSignal,
}

impl Joining {
    fn new(member: accord::Member) -> Self {
        let lease = member.lease();
        Joining {
            group: member.group().to_string(),
            key: lease.key().to_string(),
            fence: lease.fence(),
            owner: lease.owner().to_string(),
            ttl: lease.ttl(),
            signal: member.lost_signal(),
            member: Arc::new(RwLock::new(Some(member))),
        }
    }

    /// The member lease's status: exact (checked against its deadline) while the member is
    /// there to ask, the signal's after it left.
    fn status(&self) -> LeaseStatus {
        if let Ok(member) = self.member.try_read() {
            if let Some(member) = member.as_ref() {
                return member.lease().status();
            }
        }
        self.signal.status()
    }

    fn repr(&self, class: &str) -> String {
        let status = self.status().as_str();
        format!(
            "<accord.{class} group={} owner={} fence={}{}>",
            py_str_repr(&self.group),
            py_str_repr(&self.owner),
            self.fence,
            if status == "held" {
                String::new()
            } else {
                format!(" {status}")
            }
        )
    }
}

async fn update_metadata(
    member: Arc<RwLock<Option<accord::Member>>>,
    group: String,
    metadata: accord::Metadata,
) -> accord::Result<()> {
    let member = member.read().await;
    match member.as_ref() {
        Some(member) => member.update_metadata(metadata).await,
        None => Err(accord::Error::new(
            ErrorKind::LeaseLost,
            format!("this member of group {group:?} has left it"),
        )),
    }
}

async fn leave(member: Arc<RwLock<Option<accord::Member>>>) -> accord::Result<()> {
    let member = member.write().await.take();
    match member {
        Some(member) => member.leave().await,
        None => Ok(()),
    }
}

/// The attributes both member classes share.
macro_rules! member_class {
    ($name:ident, $($methods:tt)*) => {
        #[pymethods]
        impl $name {
            /// The group joined.
            #[getter]
            fn group(&self) -> &str {
                &self.joined.group
            }
            /// The key of the member lease (`accord.group/<group>/<owner>`).
            #[getter]
            fn key(&self) -> &str {
                &self.joined.key
            }
            /// The fence of the member lease.
            #[getter]
            fn fence(&self) -> i64 {
                self.joined.fence
            }
            /// The member's owner (its client's owner).
            #[getter]
            fn owner(&self) -> &str {
                &self.joined.owner
            }
            /// The ttl, in seconds, the member lease is renewed with.
            #[getter]
            fn ttl(&self) -> f64 {
                self.joined.ttl.as_secs_f64()
            }
            /// The member lease's status: "held", "ending", "released" (left), "done" or
            /// "lost".
            #[getter]
            fn status(&self) -> &'static str {
                self.joined.status().as_str()
            }
            /// Why the membership was lost; None unless lost.
            #[getter]
            fn lost_reason(&self) -> Option<&'static str> {
                self.joined.status().lost_reason().map(|why| why.as_str())
            }
            /// True once the membership is lost (not renewed in time, or the client closed).
            #[getter]
            fn is_lost(&self) -> bool {
                matches!(self.joined.status(), LeaseStatus::Lost(_))
            }
            fn __repr__(&self) -> String {
                self.joined.repr(stringify!($name))
            }

            $($methods)*
        }
    };
}

/// Membership of a group (sync API), kept by the client's keepalive. Use it as a context
/// manager to leave at the end of a block; a member dropped without `leave` leaves in the
/// background.
#[pyclass(module = "accord", frozen)]
pub struct Member {
    joined: Joining,
    lost: PyOnceLock<Py<LostSignal>>,
}

impl Member {
    pub fn new(member: accord::Member) -> Self {
        Member {
            joined: Joining::new(member),
            lost: PyOnceLock::new(),
        }
    }
}

member_class! {
    Member,
    /// The lost signal of the membership, as a lease's: `is_set()` (and `bool()`),
    /// `wait(timeout)`.
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<Py<LostSignal>> {
        let signal = self
            .lost
            .get_or_try_init(py, || Py::new(py, LostSignal::detached(self.joined.signal.clone())))?;
        Ok(signal.clone_ref(py))
    }

    /// Replaces the member's metadata (what `members` shows), renewing the membership;
    /// watchers see `Updated`.
    fn update_metadata(&self, py: Python<'_>, metadata: &Bound<'_, PyAny>) -> PyResult<()> {
        let metadata = convert::metadata("metadata", Some(metadata))?.unwrap_or_default();
        let member = self.joined.member.clone();
        let group = self.joined.group.clone();
        block_on(py, update_metadata(member, group, metadata))?.py()
    }

    /// Leaves the group now; watchers see `Left`. Leaving again is harmless; raises
    /// `LeaseLost` if the membership was lost.
    fn leave(&self, py: Python<'_>) -> PyResult<()> {
        block_on_settled(py, leave(self.joined.member.clone()))?.py()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaves the group. If the block ended normally but the membership had been lost,
    /// raises `LeaseLost`.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let left = block_on_settled(py, leave(self.joined.member.clone()))?;
        match left {
            Err(e) if exc_type.is_none_or(|t| t.is_none()) => Err(to_py(e)),
            _ => Ok(false),
        }
    }
}

/// Membership of a group (asyncio API). Use it with `async with` to leave at the end of a
/// block; a member dropped without `leave` leaves in the background.
#[pyclass(module = "accord", frozen)]
pub struct AsyncMember {
    joined: Joining,
}

impl AsyncMember {
    pub fn new(member: accord::Member) -> Self {
        AsyncMember {
            joined: Joining::new(member),
        }
    }
}

member_class! {
    AsyncMember,
    /// An awaitable that completes when the membership is lost; never for one that ends
    /// otherwise (left, or this object dropped).
    #[getter]
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let signal = self.joined.signal.clone();
        crate::completion::future_into_py_unless(
            py,
            async move {
                match signal.ended().await {
                    LeaseStatus::Lost(_) => Some(Ok(())),
                    _ => None,
                }
            },
            true,
        )
    }

    /// Replaces the member's metadata (what `members` shows), renewing the membership;
    /// watchers see `Updated`.
    fn update_metadata<'py>(
        &self,
        py: Python<'py>,
        metadata: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let metadata = convert::metadata("metadata", Some(metadata))?.unwrap_or_default();
        let member = self.joined.member.clone();
        let group = self.joined.group.clone();
        runtime::future_into_py(py, async move {
            update_metadata(member, group, metadata).await.py()
        })
    }

    /// Leaves the group now (runs to its end even if the caller is cancelled); watchers see
    /// `Left`. Leaving again is harmless; raises `LeaseLost` if the membership was lost.
    fn leave<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let member = self.joined.member.clone();
        runtime::detached_into_py(py, async move { leave(member).await.py() })
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio(slf.py(), "ready")?.call1((slf,))
    }

    /// Leaves the group. If the block ended normally but the membership had been lost,
    /// raises `LeaseLost`.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<&Bound<'py, PyAny>>,
        _exc: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let body_failed = exc_type.is_some_and(|t| !t.is_none());
        aio(py, "exit_lease")?.call1((self.leave(py)?, body_failed))
    }
}

/// A read's answer: the event; None (iterating) or `Closed` (`next`) once the watch was
/// closed; `Timeout` after `timeout` seconds.
fn answer(
    read: Read<accord::MemberEvent>,
    timeout: Option<f64>,
    iterating: bool,
) -> PyResult<Option<MemberEvent>> {
    watching::answer(read, "member event", timeout, iterating)?
        .map(MemberEvent::try_from)
        .transpose()
}

/// The members of a group, then every change (sync API): iterate it (it ends once closed),
/// or call `next`. Open it with `Client.watch`.
#[pyclass(module = "accord", frozen)]
pub struct MemberWatch {
    watching: Watching<accord::MemberWatch>,
}

impl MemberWatch {
    pub fn new(watch: accord::MemberWatch) -> Self {
        MemberWatch {
            watching: Watching::new(watch),
        }
    }

    fn read(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        iterating: bool,
    ) -> PyResult<Option<MemberEvent>> {
        let limit = convert::timeout("timeout", timeout)?;
        let read = block_on(py, self.watching.clone().read(limit))?;
        answer(read, timeout, iterating)
    }
}

#[pymethods]
impl MemberWatch {
    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.watching.closed()
    }

    /// The next event: `Members` first, then `Joined`, `Left` and `Updated` in order. Raises
    /// `Timeout` after `timeout` seconds without one, `Closed` once the watch or its client closed.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<MemberEvent> {
        self.read(py, timeout, false)?
            .ok_or_else(|| to_py(accord::Error::closed()))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<MemberEvent>> {
        self.read(py, None, true)
    }

    /// Stops listening (a read in progress ends). Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        block_on_settled(py, self.watching.clone().close())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<accord.MemberWatch{}>",
            if self.closed() { " closed" } else { "" }
        )
    }
}

/// The members of a group, then every change (asyncio API): `async for` (it ends once
/// closed), or `await next()`. Open it with `AsyncClient.watch`.
#[pyclass(module = "accord", frozen)]
pub struct AsyncMemberWatch {
    watching: Watching<accord::MemberWatch>,
}

impl AsyncMemberWatch {
    pub fn new(watch: accord::MemberWatch) -> Self {
        AsyncMemberWatch {
            watching: Watching::new(watch),
        }
    }

    fn read<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        iterating: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limit = convert::timeout("timeout", timeout)?;
        let watching = self.watching.clone();
        // Cancelling drops the read, which loses no event (the core's read is cancel-safe).
        runtime::future_into_py(py, async move {
            answer(watching.read(limit).await, timeout, iterating)
        })
    }
}

#[pymethods]
impl AsyncMemberWatch {
    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.watching.closed()
    }

    /// The next event: `Members` first, then `Joined`, `Left` and `Updated` in order. Raises
    /// `Timeout` after `timeout` seconds without one, `Closed` once the watch or its client closed.
    #[pyo3(signature = (timeout=None))]
    fn next<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        self.read(py, timeout, false)
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        aio(py, "stop_at_none")?.call1((self.read(py, None, true)?,))
    }

    /// Stops listening (a read in progress ends). Idempotent.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let watching = self.watching.clone();
        runtime::detached_into_py(py, async move {
            watching.close().await;
            Ok(())
        })
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio(slf.py(), "ready")?.call1((slf,))
    }

    #[pyo3(signature = (*_args))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio(py, "exit_closing")?.call1((self.close(py)?,))
    }

    fn __repr__(&self) -> String {
        format!(
            "<accord.AsyncMemberWatch{}>",
            if self.closed() { " closed" } else { "" }
        )
    }
}
