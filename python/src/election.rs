//! Elections: `Election` (sync) and `AsyncElection` (asyncio) to campaign, read the leader and
//! follow it; `Leadership` and `AsyncLeadership`, this client leading (an ordinary lease on the
//! election's key: fence, keepalive, lost signal); `Observer` (sync iterator) and
//! `AsyncObserver` (async iterator) of the leaders; and `Leader`, the record both report. The
//! rules (campaigners granted in arrival order, what an observer reports and when) are the
//! core's.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use accord::{CampaignOptions, CancellationToken, ErrorKind, LeaseStatus};
use chrono::{DateTime, Utc};
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCFunction, PyTuple};
use tokio::sync::RwLock;

use crate::client::opening;
use crate::convert;
use crate::errors::{to_py, IntoPyResult};
use crate::lease::LostSignal;
use crate::pool::{block_on_grants, Grants};
use crate::runtime::{self, aio, block_on, block_on_settled};
use crate::types::py_str_repr;
use crate::watching::{self, Read, Watching};

/// The options of a `campaign`; the ranges are the core's.
fn campaign_options(ttl: Option<f64>, timeout: Option<f64>) -> PyResult<CampaignOptions> {
    let mut options = CampaignOptions::new();
    if let Some(ttl) = convert::ttl("ttl", ttl)? {
        options = options.ttl(ttl);
    }
    if let Some(timeout) = convert::timeout("timeout", timeout)? {
        options = options.timeout(timeout);
    }
    Ok(options)
}

/// A campaign that Ctrl-C interrupts after it was granted gives the leadership's lease back
/// (`pool::block_on_grants`); the leadership, dropped then, announces it to observers.
impl Grants for accord::Leadership {
    fn leases(&self) -> &[accord::Lease] {
        std::slice::from_ref(self.lease())
    }
}

/// The leader of an election as the coordinator records it.
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct Leader(accord::Leader);

#[pymethods]
impl Leader {
    /// The leading client's owner.
    #[getter]
    fn owner(&self) -> &str {
        &self.0.owner
    }
    /// The value it campaigned with or last proclaimed.
    #[getter]
    fn value(&self) -> &str {
        &self.0.value
    }
    /// The leadership's fence: larger for every new leader.
    #[getter]
    fn fence(&self) -> i64 {
        self.0.fence
    }
    /// When this leadership began, by the coordinator's clock (timezone-aware, UTC).
    #[getter]
    fn since(&self) -> DateTime<Utc> {
        self.0.since
    }
    /// When the leadership expires unless renewed (the coordinator's clock).
    #[getter]
    fn expires_at(&self) -> DateTime<Utc> {
        self.0.expires_at
    }

    fn __repr__(&self) -> String {
        format!(
            "Leader(owner={}, value={}, fence={})",
            py_str_repr(&self.0.owner),
            py_str_repr(&self.0.value),
            self.0.fence
        )
    }
}

/// What both leadership classes hold: the core's leadership until it resigns, and what stays
/// readable after.
struct Leading {
    leadership: Arc<RwLock<Option<accord::Leadership>>>,
    election: accord::Election,
    key: String,
    fence: i64,
    owner: String,
    ttl: Duration,
    /// The value observers see: only `proclaim` changes it, and keeps this up to date, so that
    /// reading it never waits for a `proclaim` or `resign` in flight.
    value: Arc<Mutex<String>>,
    signal: accord::LostSignal,
}

impl Leading {
    fn new(leadership: accord::Leadership) -> Self {
        let lease = leadership.lease();
        Leading {
            election: leadership.election().clone(),
            key: lease.key().to_string(),
            fence: lease.fence(),
            owner: lease.owner().to_string(),
            ttl: lease.ttl(),
            value: Arc::new(Mutex::new(leadership.value())),
            signal: leadership.lost_signal(),
            leadership: Arc::new(RwLock::new(Some(leadership))),
        }
    }

    /// The leadership lease's status: exact (checked against its deadline) while the
    /// leadership is there to ask, the signal's after it resigned.
    fn status(&self) -> LeaseStatus {
        if let Ok(leadership) = self.leadership.try_read() {
            if let Some(leadership) = leadership.as_ref() {
                return leadership.lease().status();
            }
        }
        self.signal.status()
    }

    fn value(&self) -> String {
        self.value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn repr(&self, class: &str) -> String {
        let status = self.status().as_str();
        format!(
            "<accord.{class} election={} owner={} fence={}{}>",
            py_str_repr(self.election.name()),
            py_str_repr(&self.owner),
            self.fence,
            if status == "held" {
                String::new()
            } else {
                format!(" {status}")
            }
        )
    }

    fn proclaiming(&self, value: String) -> impl std::future::Future<Output = accord::Result<()>> {
        let (leadership, cache) = (self.leadership.clone(), self.value.clone());
        let name = self.election.name().to_string();
        async move {
            let leadership = leadership.read().await;
            match leadership.as_ref() {
                Some(leadership) => {
                    leadership.proclaim(&value).await?;
                    *cache.lock().unwrap_or_else(PoisonError::into_inner) = leadership.value();
                    Ok(())
                }
                None => Err(accord::Error::new(
                    ErrorKind::LeaseLost,
                    format!("this leadership of election {name:?} was resigned"),
                )),
            }
        }
    }

    fn resigning(&self) -> impl std::future::Future<Output = accord::Result<()>> {
        let leadership = self.leadership.clone();
        async move {
            let leadership = leadership.write().await.take();
            match leadership {
                Some(leadership) => leadership.resign().await,
                None => Ok(()),
            }
        }
    }
}

/// The attributes both leadership classes share.
macro_rules! leadership_class {
    ($name:ident, $election:ident, $($methods:tt)*) => {
        #[pymethods]
        impl $name {
            /// The election led.
            #[getter]
            fn election(&self) -> $election {
                $election::new(self.leading.election.clone())
            }
            /// The key of the leadership lease (`accord.election/<name>`, the name
            /// percent-encoded).
            #[getter]
            fn key(&self) -> &str {
                &self.leading.key
            }
            /// The leadership's fence: pass it to what the leader writes, so that a deposed
            /// leader's late writes are refused.
            #[getter]
            fn fence(&self) -> i64 {
                self.leading.fence
            }
            /// The leader's owner (its client's owner).
            #[getter]
            fn owner(&self) -> &str {
                &self.leading.owner
            }
            /// The ttl, in seconds, the leadership lease is renewed with.
            #[getter]
            fn ttl(&self) -> f64 {
                self.leading.ttl.as_secs_f64()
            }
            /// The value observers see: the campaign's, or the last one proclaimed.
            #[getter]
            fn value(&self) -> String {
                self.leading.value()
            }
            /// The leadership lease's status: "held", "ending", "released" (resigned), or
            /// "lost".
            #[getter]
            fn status(&self) -> &'static str {
                self.leading.status().as_str()
            }
            /// Why the leadership was lost; None unless lost.
            #[getter]
            fn lost_reason(&self) -> Option<&'static str> {
                self.leading.status().lost_reason().map(|why| why.as_str())
            }
            /// True once the leadership is lost (not renewed in time, or the client closed):
            /// stop acting as the leader.
            #[getter]
            fn is_lost(&self) -> bool {
                matches!(self.leading.status(), LeaseStatus::Lost(_))
            }
            fn __repr__(&self) -> String {
                self.leading.repr(stringify!($name))
            }

            $($methods)*
        }
    };
}

/// This client leads an election (sync API): an ordinary lease on the election's key, kept by
/// the client's keepalive. Use it as a context manager to resign at the end of a block; a
/// leadership dropped without `resign` resigns in the background.
#[pyclass(module = "accord", frozen)]
pub struct Leadership {
    leading: Leading,
    lost: PyOnceLock<Py<LostSignal>>,
}

impl Leadership {
    fn new(leadership: accord::Leadership) -> Self {
        Leadership {
            leading: Leading::new(leadership),
            lost: PyOnceLock::new(),
        }
    }
}

leadership_class! {
    Leadership,
    Election,
    /// The lost signal of the leadership, as a lease's: `is_set()` (and `bool()`),
    /// `wait(timeout)`.
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<Py<LostSignal>> {
        let signal = self.lost.get_or_try_init(py, || {
            Py::new(py, LostSignal::detached(self.leading.signal.clone()))
        })?;
        Ok(signal.clone_ref(py))
    }

    /// Changes the value observers see, without a new election (the fence stays). Raises
    /// `LeaseLost` once the leadership was lost or resigned.
    fn proclaim(&self, py: Python<'_>, #[pyo3(from_py_with = convert::value)] value: String) -> PyResult<()> {
        block_on(py, self.leading.proclaiming(value.to_string()))?.py()
    }

    /// Stops leading: the next campaigner in line leads, observers see it. Resigning again is
    /// harmless; raises `LeaseLost` if the leadership was lost.
    fn resign(&self, py: Python<'_>) -> PyResult<()> {
        block_on_settled(py, self.leading.resigning())?.py()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Resigns. If the block ended normally but the leadership had been lost, raises
    /// `LeaseLost`: what the block did was not protected to its end.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let resigned = block_on_settled(py, self.leading.resigning())?;
        match resigned {
            Err(e) if exc_type.is_none_or(|t| t.is_none()) => Err(to_py(e)),
            _ => Ok(false),
        }
    }
}

/// This client leads an election (asyncio API). Use it with `async with` to resign at the end
/// of a block; a leadership dropped without `resign` resigns in the background.
#[pyclass(module = "accord", frozen)]
pub struct AsyncLeadership {
    leading: Leading,
}

impl AsyncLeadership {
    fn new(leadership: accord::Leadership) -> Self {
        AsyncLeadership {
            leading: Leading::new(leadership),
        }
    }
}

leadership_class! {
    AsyncLeadership,
    AsyncElection,
    /// An awaitable that completes when the leadership is lost; never for one that ends
    /// otherwise (resigned, or this object dropped).
    #[getter]
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let signal = self.leading.signal.clone();
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

    /// Changes the value observers see, without a new election (the fence stays). Raises
    /// `LeaseLost` once the leadership was lost or resigned.
    fn proclaim<'py>(&self, py: Python<'py>, #[pyo3(from_py_with = convert::value)] value: String) -> PyResult<Bound<'py, PyAny>> {
        let proclaiming = self.leading.proclaiming(value);
        runtime::future_into_py(py, async move { proclaiming.await.py() })
    }

    /// Stops leading (runs to its end even if the caller is cancelled): the next campaigner in
    /// line leads, observers see it. Resigning again is harmless; raises `LeaseLost` if the
    /// leadership was lost.
    fn resign<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let resigning = self.leading.resigning();
        runtime::detached_into_py(py, async move { resigning.await.py() })
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio(slf.py(), "ready")?.call1((slf,))
    }

    /// Resigns. If the block ended normally but the leadership had been lost, raises
    /// `LeaseLost`.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<&Bound<'py, PyAny>>,
        _exc: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let body_failed = exc_type.is_some_and(|t| !t.is_none());
        aio(py, "exit_lease")?.call1((self.resign(py)?, body_failed))
    }
}

/// An election (sync API): `campaign` to lead it, `leader` to read its leader, `observe` to
/// follow it. Get it with `Client.election(name)`.
#[pyclass(module = "accord", frozen)]
pub struct Election {
    inner: accord::Election,
}

impl Election {
    pub fn new(inner: accord::Election) -> Self {
        Election { inner }
    }
}

#[pymethods]
impl Election {
    /// The election's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// Waits in line to lead (campaigners are granted in arrival order), then leads with
    /// `value`, which observers see. `ttl` (seconds): a leader whose process dies is replaced
    /// this long after its last renewal. Raises `Timeout` after `timeout` seconds, `Closed` if
    /// the client closes. Ctrl-C interrupts the wait; in every failure nothing is left held and
    /// no place in line is kept.
    #[pyo3(signature = (value, *, ttl=None, timeout=None))]
    fn campaign(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::value)] value: String,
        ttl: Option<f64>,
        timeout: Option<f64>,
    ) -> PyResult<Leadership> {
        let cancel = CancellationToken::new();
        let options = campaign_options(ttl, timeout)?.cancel(cancel.clone());
        let leadership = block_on_grants(py, &cancel, self.inner.campaign(&value, options))?;
        Ok(Leadership::new(leadership))
    }

    /// The current leader, or None when nobody leads (one read).
    fn leader(&self, py: Python<'_>) -> PyResult<Option<Leader>> {
        Ok(block_on(py, self.inner.leader())?.py()?.map(Leader))
    }

    /// Follows the election: iterate the observer for the current leader (None when nobody
    /// leads), then every new leader, every proclaimed value and every vacancy (None), each
    /// once, in order. Listens before it returns, so no change after that is missed.
    fn observe(&self, py: Python<'_>) -> PyResult<Observer> {
        let observer = block_on(py, self.inner.observe())?.py()?;
        Ok(Observer {
            watching: Watching::new(observer),
        })
    }

    fn __repr__(&self) -> String {
        format!("<accord.Election name={}>", py_str_repr(self.inner.name()))
    }
}

/// An election (asyncio API): the same calls as `Election`, as coroutines. Get it with
/// `AsyncClient.election(name)`.
#[pyclass(module = "accord", frozen)]
pub struct AsyncElection {
    inner: accord::Election,
}

impl AsyncElection {
    pub fn new(inner: accord::Election) -> Self {
        AsyncElection { inner }
    }
}

#[pymethods]
impl AsyncElection {
    /// The election's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// Waits in line to lead, then leads with `value`: await it, or use it with `async with`
    /// to resign at the end of the block. See `Election.campaign`. A cancelled campaign raises
    /// `CancelledError` only once nothing it may have been granted is held.
    #[pyo3(signature = (value, *, ttl=None, timeout=None))]
    fn campaign<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::value)] value: String,
        ttl: Option<f64>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = campaign_options(ttl, timeout)?;
        let election = self.inner.clone();
        opening(py, move |py| {
            let cancel = CancellationToken::new();
            let (election, value) = (election.clone(), value.clone());
            let options = options.clone().cancel(cancel.clone());
            let campaigning = runtime::future_into_py(py, async move {
                election
                    .campaign(&value, options)
                    .await
                    .py()
                    .map(AsyncLeadership::new)
            })?;
            let cancel = PyCFunction::new_closure(py, None, None, move |_args, _kwargs| {
                cancel.cancel();
            })?;
            Ok(aio(py, "settle")?
                .call1((campaigning, cancel, "resign"))?
                .unbind())
        })
    }

    /// The current leader, or None when nobody leads (one read).
    fn leader<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let election = self.inner.clone();
        runtime::future_into_py(
            py,
            async move { Ok(election.leader().await.py()?.map(Leader)) },
        )
    }

    /// Follows the election; see `Election.observe`. Await it, or use it with `async with` to
    /// close the observer at the end of the block.
    fn observe<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let election = self.inner.clone();
        opening(py, move |py| {
            let election = election.clone();
            let observing = runtime::future_into_py(py, async move {
                let observer = election.observe().await.py()?;
                Ok(AsyncObserver {
                    watching: Watching::new(observer),
                })
            })?;
            Ok(observing.unbind())
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<accord.AsyncElection name={}>",
            py_str_repr(self.inner.name())
        )
    }
}

/// A read's answer: `Some` of the leader, or of None when nobody leads (a vacancy); None
/// (iterating) or `Closed` (`next`) once the observer was closed; `Timeout` after `timeout`
/// seconds.
fn answer(
    read: Read<Option<accord::Leader>>,
    timeout: Option<f64>,
    iterating: bool,
) -> PyResult<Option<Option<Leader>>> {
    Ok(watching::answer(read, "change of leader", timeout, iterating)?.map(|l| l.map(Leader)))
}

/// The leaders of an election (sync API): iterate it (it ends once closed), or call `next`.
/// Open it with `Election.observe`.
#[pyclass(module = "accord", frozen)]
pub struct Observer {
    watching: Watching<accord::Observer>,
}

impl Observer {
    fn read(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        iterating: bool,
    ) -> PyResult<Option<Option<Leader>>> {
        let limit = convert::timeout("timeout", timeout)?;
        let read = block_on(py, self.watching.clone().read(limit))?;
        answer(read, timeout, iterating)
    }
}

#[pymethods]
impl Observer {
    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.watching.closed()
    }

    /// The next change of leadership: the current state first (the leader, or None when
    /// nobody leads), then each new leader, new value and vacancy (None: the leader resigned
    /// or expired and nobody leads yet) once, fences never decreasing. Raises `Timeout` after
    /// `timeout` seconds without one, `Closed` once the observer or its client closed.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Leader>> {
        self.read(py, timeout, false)?
            .ok_or_else(|| to_py(accord::Error::closed()))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next leader or None (a vacancy); iteration stops once closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Option<Leader>>> {
        self.read(py, None, true)
    }

    /// Stops following (a read in progress ends). Idempotent.
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
            "<accord.Observer{}>",
            if self.closed() { " closed" } else { "" }
        )
    }
}

/// The leaders of an election (asyncio API): `async for` (it ends once closed), or
/// `await next()`. Open it with `AsyncElection.observe`.
#[pyclass(module = "accord", frozen)]
pub struct AsyncObserver {
    watching: Watching<accord::Observer>,
}

impl AsyncObserver {
    fn read<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        iterating: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limit = convert::timeout("timeout", timeout)?;
        let watching = self.watching.clone();
        // Cancelling drops the read, which loses no change (the core's read is cancel-safe).
        // Iterating, a closed observer ends the iteration here: None is a vacancy.
        runtime::future_into_py(py, async move {
            answer(watching.read(limit).await, timeout, iterating)?
                .ok_or_else(|| PyStopAsyncIteration::new_err(()))
        })
    }
}

#[pymethods]
impl AsyncObserver {
    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.watching.closed()
    }

    /// The next change of leadership (a leader, or None: a vacancy); see `Observer.next`.
    #[pyo3(signature = (timeout=None))]
    fn next<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        self.read(py, timeout, false)
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.read(py, None, true)
    }

    /// Stops following (a read in progress ends). Idempotent.
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
            "<accord.AsyncObserver{}>",
            if self.closed() { " closed" } else { "" }
        )
    }
}
