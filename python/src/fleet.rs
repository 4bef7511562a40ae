//! Fleets: `Fleet` (sync iterator) and `AsyncFleet` (async iterator) over the core's pull loop
//! of events (`Assigned`, `Revoked`), and `ShardLease`, the read-only view of a shard's lease.
//! Asking for the next event acknowledges the previous one (a hand-off is released then), so
//! nothing here reads an event before the user asks for it. The rules (balance, hand-offs,
//! limits) are the core's.

use std::sync::Arc;
use std::time::Duration;

use accord::FleetOptions;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::convert;
use crate::errors::{invalid, to_py, IntoPyResult, Timeout};
use crate::lease::LostSignal;
use crate::membership::{infos, MemberInfo};
use crate::pool;
use crate::runtime::{self, aio, block_on, block_on_settled};
use crate::types::py_str_repr;

/// The options of `fleet`: exactly one of `shards` (a count) and `keys` (names).
#[allow(clippy::too_many_arguments)]
pub fn fleet_options(
    shards: Option<i64>,
    keys: Option<&Bound<'_, PyAny>>,
    ttl: Option<f64>,
    period: Option<f64>,
    max_handoffs_per_period: Option<i64>,
    handoff_timeout: Option<f64>,
    metadata: Option<&Bound<'_, PyAny>>,
) -> PyResult<FleetOptions> {
    let keys = keys.filter(|k| !k.is_none());
    let mut options = match (shards, keys) {
        (Some(n), None) => FleetOptions::shards(accord::limits::shards(n).py()?),
        (None, Some(keys)) => FleetOptions::keys(pool::keys(keys)?),
        (Some(_), Some(_)) => {
            return Err(invalid(
                "shards",
                "give either shards (a count) or keys (the shards' names), not both",
            ))
        }
        (None, None) => {
            return Err(invalid(
                "shards",
                "is required: give shards (a count) or keys (the shards' names)",
            ))
        }
    };
    if let Some(ttl) = convert::ttl("ttl", ttl)? {
        options = options.ttl(ttl);
    }
    if let Some(period) = convert::duration("period", period)? {
        options = options.period(period);
    }
    if let Some(n) = max_handoffs_per_period {
        options = options.max_handoffs_per_period(accord::limits::handoffs_per_period(n).py()?);
    }
    if let Some(timeout) = convert::duration("handoff_timeout", handoff_timeout)? {
        options = options.handoff_timeout(timeout);
    }
    if let Some(metadata) = convert::metadata("metadata", metadata)? {
        options = options.metadata(metadata);
    }
    Ok(options)
}

/// A shard's lease as a fleet's user sees it: its fence (pass it to what you write) and its
/// status. The fleet holds, renews and releases the lease itself.
#[pyclass(module = "accord", frozen)]
pub struct ShardLease {
    inner: accord::ShardLease,
    lost: PyOnceLock<Py<LostSignal>>,
}

#[pymethods]
impl ShardLease {
    /// The shard.
    #[getter]
    fn shard(&self) -> &str {
        self.inner.shard()
    }
    /// The key of its lease (`accord.fleet/<name>/s/<shard>`).
    #[getter]
    fn key(&self) -> &str {
        self.inner.key()
    }
    /// The fence of this grant of the shard: larger than every earlier grant's.
    #[getter]
    fn fence(&self) -> i64 {
        self.inner.fence()
    }
    /// The lease's status: "held", "ending", "released", "done" or "lost".
    #[getter]
    fn status(&self) -> &'static str {
        self.inner.status().as_str()
    }
    /// Why the lease was lost; None unless lost.
    #[getter]
    fn lost_reason(&self) -> Option<&'static str> {
        self.inner.status().lost_reason().map(|why| why.as_str())
    }
    /// True once the lease was lost.
    #[getter]
    fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }
    /// The lost signal, as a lease's: `is_set()` (and `bool()`), `wait(timeout)` (which
    /// blocks: in asyncio code, the fleet's `Revoked(shard, "lost", fence)` tells the same).
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<Py<LostSignal>> {
        let signal = self.lost.get_or_try_init(py, || {
            Py::new(py, LostSignal::detached(self.inner.lost_signal()))
        })?;
        Ok(signal.clone_ref(py))
    }

    fn __repr__(&self) -> String {
        let status = self.inner.status().as_str();
        format!(
            "<accord.ShardLease shard={} fence={}{}>",
            py_str_repr(self.inner.shard()),
            self.inner.fence(),
            if status == "held" {
                String::new()
            } else {
                format!(" {status}")
            }
        )
    }
}

/// This member now holds `shard`; `lease` has its fence.
#[pyclass(module = "accord", frozen)]
pub struct Assigned {
    #[pyo3(get)]
    shard: String,
    #[pyo3(get)]
    lease: Py<ShardLease>,
}

#[pymethods]
impl Assigned {
    #[classattr]
    fn __match_args__() -> (&'static str, &'static str) {
        ("shard", "lease")
    }

    fn __repr__(&self) -> String {
        format!(
            "Assigned(shard={}, fence={})",
            py_str_repr(&self.shard),
            self.lease.get().inner.fence()
        )
    }
}

/// This member no longer holds `shard` (for reason "handoff": will not once the next event
/// is asked for, or the hand-off timeout passed). `reason` is "handoff", "lost" or "closed";
/// `fence` is the fence of the grant revoked.
#[pyclass(module = "accord", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub struct Revoked {
    #[pyo3(get)]
    shard: String,
    #[pyo3(get)]
    reason: &'static str,
    #[pyo3(get)]
    fence: i64,
}

#[pymethods]
impl Revoked {
    #[classattr]
    fn __match_args__() -> (&'static str, &'static str, &'static str) {
        ("shard", "reason", "fence")
    }

    fn __repr__(&self) -> String {
        format!(
            "Revoked(shard={}, reason='{}', fence={})",
            py_str_repr(&self.shard),
            self.reason,
            self.fence
        )
    }
}

/// A fleet event on its way to Python (the shard lease's object is made there).
pub struct FleetEvent(accord::FleetEvent);

impl<'py> IntoPyObject<'py> for FleetEvent {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            accord::FleetEvent::Assigned { shard, lease } => {
                let lease = Py::new(
                    py,
                    ShardLease {
                        inner: lease,
                        lost: PyOnceLock::new(),
                    },
                )?;
                Ok(Bound::new(py, Assigned { shard, lease })?.into_any())
            }
            accord::FleetEvent::Revoked {
                shard,
                reason,
                fence,
            } => Ok(Bound::new(
                py,
                Revoked {
                    shard,
                    reason: reason.as_str(),
                    fence,
                },
            )?
            .into_any()),
            other => Err(to_py(accord::Error::internal(format!(
                "a fleet event this binding does not know: {other:?}"
            )))),
        }
    }
}

/// The next event of `fleet`, or None once it is closed and every event was read; `Timeout`
/// after `timeout` seconds (`limit`) without one.
async fn next_event(
    fleet: Arc<accord::Fleet>,
    limit: Option<Duration>,
    timeout: Option<f64>,
) -> PyResult<Option<FleetEvent>> {
    let event = match limit {
        Some(t) => tokio::time::timeout(t, fleet.next_event())
            .await
            .map_err(|_| {
                Timeout::new_err(format!(
                    "no fleet event within {} s",
                    timeout.unwrap_or_default()
                ))
            })?,
        None => fleet.next_event().await,
    };
    Ok(event.map(FleetEvent))
}

fn repr(class: &str, fleet: &accord::Fleet) -> String {
    format!(
        "<accord.{class} name={} shards={}{}>",
        py_str_repr(fleet.name()),
        fleet.shards().len(),
        if fleet.is_closed() { " closed" } else { "" }
    )
}

/// A member of a fleet (sync API), balancing its shards in the background. Iterate it for
/// its events (`Assigned`, `Revoked`; the loop ends once it is closed and every event was
/// read): asking for the next event acknowledges the previous one, so a shard revoked for a
/// hand-off is released when the loop body is done with it. `close` (or the end of a `with`
/// block) hands every shard back; a fleet dropped unclosed is closed in the background.
#[pyclass(module = "accord", frozen)]
pub struct Fleet {
    inner: Arc<accord::Fleet>,
}

impl Fleet {
    pub fn new(inner: accord::Fleet) -> Self {
        Fleet {
            inner: Arc::new(inner),
        }
    }
}

#[pymethods]
impl Fleet {
    /// The fleet's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// True once the fleet stopped (closed, or its client closed).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The shards this member holds now, in name order.
    fn shards(&self) -> Vec<String> {
        self.inner.shards()
    }

    /// The fleet's live members (one read).
    fn members(&self, py: Python<'_>) -> PyResult<Vec<MemberInfo>> {
        Ok(infos(block_on(py, self.inner.members())?.py()?))
    }

    /// The next event (`Assigned` or `Revoked`); None once the fleet is closed and every
    /// event was read. Asking acknowledges the previous event: a shard revoked for a
    /// hand-off is released then, so do its work (a checkpoint) first. Raises `Timeout` after
    /// `timeout` seconds without one.
    #[pyo3(signature = (timeout=None))]
    fn next_event(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<FleetEvent>> {
        let limit = convert::timeout("timeout", timeout)?;
        block_on(py, next_event(self.inner.clone(), limit, timeout))?
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<FleetEvent>> {
        self.next_event(py, None)
    }

    /// Hands every shard back (each yields `Revoked(shard, "closed", fence)`, still to be
    /// read), leaves the fleet and stops. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        block_on_settled(py, self.inner.close())
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
        repr("Fleet", &self.inner)
    }
}

/// A member of a fleet (asyncio API): `async for event in fleet`, or `await next_event()`;
/// see `Fleet`. `async with` closes it at the end of the block.
#[pyclass(module = "accord", frozen)]
pub struct AsyncFleet {
    inner: Arc<accord::Fleet>,
}

impl AsyncFleet {
    pub fn new(inner: accord::Fleet) -> Self {
        AsyncFleet {
            inner: Arc::new(inner),
        }
    }

    fn read<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let limit = convert::timeout("timeout", timeout)?;
        // Cancelling drops the read, which loses no event (the core's read is cancel-safe).
        runtime::future_into_py(py, next_event(self.inner.clone(), limit, timeout))
    }
}

#[pymethods]
impl AsyncFleet {
    /// The fleet's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// True once the fleet stopped (closed, or its client closed).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The shards this member holds now, in name order.
    fn shards(&self) -> Vec<String> {
        self.inner.shards()
    }

    /// The fleet's live members (one read).
    fn members<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let fleet = self.inner.clone();
        runtime::future_into_py(py, async move { Ok(infos(fleet.members().await.py()?)) })
    }

    /// The next event; None once the fleet is closed and every event was read. See
    /// `Fleet.next_event`.
    #[pyo3(signature = (timeout=None))]
    fn next_event<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.read(py, timeout)
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        aio(py, "stop_at_none")?.call1((self.read(py, None)?,))
    }

    /// Hands every shard back, leaves the fleet and stops (runs to its end even if the caller
    /// is cancelled). Idempotent.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let fleet = self.inner.clone();
        runtime::detached_into_py(py, async move {
            fleet.close().await;
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
        repr("AsyncFleet", &self.inner)
    }
}
