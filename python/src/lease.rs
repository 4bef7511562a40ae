//! `Lease` (sync) and `AsyncLease` (asyncio): a held key, renewed in the background by the
//! core until released, done or lost; and `LostSignal`, the sync lease's lost signal. Whether
//! and how a lease ended is the core's answer (`accord::LeaseStatus`): the waits here end when
//! the core says the lease ended, and report a loss only if it ended lost.

use std::sync::{Arc, Weak};
use std::time::Duration;

use accord::LeaseStatus;
use chrono::{DateTime, Utc};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt;

use crate::convert;
use crate::errors::{to_py, IntoPyResult};
use crate::runtime::{self, aio, block_on, block_on_settled};
use crate::types::py_str_repr;

/// `lease.status`: the core's name for the status.
fn status_name(status: LeaseStatus) -> PyResult<&'static str> {
    Ok(status.as_str())
}

/// The lost reason: the core's name for it; none unless lost.
fn lost_reason_name(status: LeaseStatus) -> PyResult<Option<&'static str>> {
    Ok(status.lost_reason().map(|why| why.as_str()))
}

/// Waits, with the GIL released, until the lease ends or `timeout` passes; true if it ended
/// lost. A lease released, done or dropped ends the wait too (false), as the core says.
fn wait_for_end(
    py: Python<'_>,
    signal: &accord::LostSignal,
    timeout: Option<Duration>,
) -> PyResult<bool> {
    let ended = block_on(py, async {
        match timeout {
            Some(t) => tokio::time::timeout(t, signal.ended()).await.ok(),
            None => Some(signal.ended().await),
        }
    })?;
    Ok(matches!(ended, Some(LeaseStatus::Lost(_))))
}

/// A statement of the core's as Python takes it: the text, and the parameters as strings, or
/// (`typed`) as the Python values of their kinds (str, int, None) for drivers that bind each
/// parameter by its type (asyncpg).
fn sql_call(py: Python<'_>, call: accord::SqlCall, typed: bool) -> PyResult<(String, Py<PyList>)> {
    let params: Vec<Bound<'_, PyAny>> = call
        .params
        .iter()
        .map(|param| match param {
            accord::SqlParam::BigInt(v) if typed => v.into_bound_py_any(py),
            _ => param.to_text().into_bound_py_any(py),
        })
        .collect::<PyResult<_>>()?;
    Ok((call.text, PyList::new(py, params)?.unbind()))
}

/// The placeholder style a caller names (`placeholders="$1"` or `"%s"`), the core's names.
fn placeholders(name: &str) -> PyResult<accord::Placeholders> {
    accord::Placeholders::named("placeholders", name).py()
}

/// A function of `accord/_fenced.py`, which runs the statements on the caller's driver.
fn fenced_py<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static FENCED: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    FENCED
        .get_or_try_init(py, || py.import("accord._fenced").map(Bound::unbind))?
        .bind(py)
        .getattr(name)
}

/// accord's exception for a statement of `fence_check_sql()` or `done_sql()` that the server
/// refused with SQLSTATE `sqlstate` (`LeaseLost` for `AC001`: the fence is not the key's live
/// grant), the core's mapping.
#[pyfunction]
pub fn _fenced_refusal<'py>(
    py: Python<'py>,
    what: &str,
    sqlstate: &str,
    message: &str,
) -> Bound<'py, PyAny> {
    to_py(accord::fenced_refusal(what, sqlstate, message))
        .into_value(py)
        .into_bound(py)
        .into_any()
}

/// The attributes both lease classes share.
macro_rules! lease_class {
    ($name:ident, $($methods:tt)*) => {
        #[pymethods]
        impl $name {
            /// The key held.
            #[getter]
            fn key(&self) -> &str {
                self.inner.key()
            }
            /// The fencing token of this grant: larger than that of every earlier grant.
            #[getter]
            fn fence(&self) -> i64 {
                self.inner.fence()
            }
            #[getter]
            fn owner(&self) -> &str {
                self.inner.owner()
            }
            #[getter]
            fn namespace(&self) -> &str {
                self.inner.namespace()
            }
            /// The ttl, in seconds, the lease is renewed with.
            #[getter]
            fn ttl(&self) -> f64 {
                self.inner.ttl().as_secs_f64()
            }
            /// The expiry the coordinator last confirmed (its clock), timezone-aware (UTC).
            #[getter]
            fn expires_at(&self) -> DateTime<Utc> {
                self.inner.expires_at()
            }
            /// The key's metadata as of the latest grant, renew or done of this lease.
            #[getter]
            fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                convert::metadata_to_py(py, &self.inner.metadata())
            }
            /// True for one of the key's shared holders (`acquire(..., shared=True)`): it
            /// renews and releases, but cannot change the key's metadata or mark it done.
            #[getter]
            fn shared(&self) -> bool {
                self.inner.is_shared()
            }
            /// True once the lease is lost (exact: checked against its deadline).
            #[getter]
            fn is_lost(&self) -> bool {
                self.inner.is_lost()
            }
            /// Where the lease stands: "held"; "ending" (a release or done is in flight, or
            /// failed on the way: no longer renewed, lost at its deadline unless a retry
            /// succeeds); "released"; "done"; or "lost". Exact: checked against its deadline.
            #[getter]
            fn status(&self) -> PyResult<&'static str> {
                status_name(self.inner.status())
            }
            /// Why the lease was lost: "not_renewed" (no renewal confirmed before its
            /// deadline), "not_recorded" (the coordinator no longer records this grant),
            /// "client_closed" (its client was closed while holding it) or "forked" (asked in a
            /// child process after fork()); None unless lost.
            #[getter]
            fn lost_reason(&self) -> PyResult<Option<&'static str>> {
                lost_reason_name(self.inner.status())
            }
            /// The statement `fenced` runs (`accord.check_fence`), for a driver of your own:
            /// (text with `$1`, `$2`, … or, `placeholders="%s"`, DB-API's `%s`; the
            /// parameters as strings, or `typed` as str/int/None). `LeaseLost` when the lease
            /// is already not held here; `Unsupported` on the embedded store.
            #[pyo3(signature = (*, placeholders="$1", typed=false))]
            fn fence_check_sql(
                &self,
                py: Python<'_>,
                placeholders: &str,
                typed: bool,
            ) -> PyResult<(String, Py<PyList>)> {
                let call = self.inner.fenced_call_with(self::placeholders(placeholders)?).py()?;
                sql_call(py, call, typed)
            }
            /// The statement `done_in` runs (`accord.done`, merging `metadata`; it answers the
            /// key's metadata as JSON text), for a driver of your own; then call `done_sent()`.
            /// `placeholders` and `typed` as `fence_check_sql`'s.
            #[pyo3(signature = (metadata=None, *, placeholders="$1", typed=false))]
            fn done_sql(
                &self,
                py: Python<'_>,
                metadata: Option<&Bound<'_, PyAny>>,
                placeholders: &str,
                typed: bool,
            ) -> PyResult<(String, Py<PyList>)> {
                let metadata = convert::metadata("metadata", metadata)?;
                let style = self::placeholders(placeholders)?;
                let call = self.inner.done_in_call_with(metadata.as_ref(), style).py()?;
                sql_call(py, call, typed)
            }
            /// Says that `done_sql()`'s statement ran in the application's transaction: the
            /// lease settles as done at once after the commit, and is renewed as before after a
            /// rollback.
            fn done_sent(&self) {
                self.inner.done_in_sent();
            }
            fn __repr__(&self) -> String {
                let status = status_name(self.inner.status()).unwrap_or("?");
                format!(
                    "<accord.{} key={} fence={} owner={}{}{}>",
                    stringify!($name),
                    py_str_repr(self.inner.key()),
                    self.inner.fence(),
                    py_str_repr(self.inner.owner()),
                    if self.inner.is_shared() { " shared" } else { "" },
                    if status == "held" { String::new() } else { format!(" {status}") },
                )
            }

            $($methods)*
        }
    };
}

/// A held key (sync API), renewed in the background until released, done or lost. Use it as
/// a context manager to release it at the end of a block; a lease dropped without release is
/// released in the background.
#[pyclass(module = "accord", frozen)]
pub struct Lease {
    inner: Arc<accord::Lease>,
    /// The `lost` signal object, made at its first read.
    lost: PyOnceLock<Py<LostSignal>>,
}

impl Lease {
    pub fn new(inner: accord::Lease) -> Self {
        Lease {
            inner: Arc::new(inner),
            lost: PyOnceLock::new(),
        }
    }
}

lease_class! {
    Lease,
    /// The lost signal, in the style of `threading.Event`: `lease.lost.is_set()` (also
    /// `bool(lease.lost)`, so `if lease.lost:` reads as before) and `lease.lost.wait(timeout)`.
    /// Once set, stop acting on what the lease protects.
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<Py<LostSignal>> {
        let signal = self.lost.get_or_try_init(py, || {
            Py::new(
                py,
                LostSignal {
                    signal: self.inner.lost_signal(),
                    lease: Arc::downgrade(&self.inner),
                },
            )
        })?;
        Ok(signal.clone_ref(py))
    }

    /// The same as `lease.lost.wait(timeout)`: blocks until the lease is lost (True), ends
    /// otherwise (released, done: False) or `timeout` seconds pass (whether it is lost then).
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = convert::timeout("timeout", timeout)?;
        self.inner.check_process().py()?;
        if self.inner.is_lost() {
            return Ok(true);
        }
        let lost = wait_for_end(py, &self.inner.lost_signal(), timeout)?;
        Ok(lost || self.inner.is_lost())
    }

    /// Extends the lease by its ttl now, merging `metadata` into the key's metadata.
    #[pyo3(signature = (metadata=None))]
    fn renew(&self, py: Python<'_>, metadata: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let metadata = convert::metadata("metadata", metadata)?;
        let lease = &*self.inner;
        block_on(py, async move {
            match metadata {
                Some(m) => lease.renew_with_metadata(m).await,
                None => lease.renew().await,
            }
        })?
        .py()
    }

    /// Releases the key and wakes its waiters. Releasing again is harmless; after the lease
    /// was lost this raises `LeaseLost`.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        block_on_settled(py, self.inner.release())?.py()
    }

    /// Marks the key done (never granted again until `reset`), merging `metadata`, and
    /// releases it.
    #[pyo3(signature = (metadata=None))]
    fn done(&self, py: Python<'_>, metadata: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let metadata = convert::metadata("metadata", metadata)?;
        block_on_settled(py, self.inner.done(metadata))?.py()
    }

    /// Checks this lease in the application's transaction, before its writes: `conn` is a
    /// psycopg 3 `Connection` or `Cursor`, or a psycopg2 connection or cursor, inside a
    /// transaction. After it returns, every write of that transaction commits before any later
    /// grant of the key, even if the lease expires before the commit. `LeaseLost` when the lease is not the key's live grant (or
    /// already lost here): roll back. The key's row is held until the transaction ends (the
    /// lease's own renewal waits for it): keep such transactions well inside the ttl.
    fn fenced(slf: &Bound<'_, Self>, conn: &Bound<'_, PyAny>) -> PyResult<()> {
        fenced_py(slf.py(), "fenced")?.call1((slf, conn))?;
        Ok(())
    }

    /// Marks the key done in the application's transaction (`conn` as `fenced`'s), merging
    /// `metadata`, and returns the key's metadata. The done commits with the transaction's
    /// writes or not at all: after the commit the lease ends as "done" (not lost), after a
    /// rollback it is still held and renewed.
    #[pyo3(signature = (conn, metadata=None))]
    fn done_in<'py>(
        slf: &Bound<'py, Self>,
        conn: &Bound<'py, PyAny>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        fenced_py(slf.py(), "done_in")?.call1((slf, conn, metadata))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases the lease. If the block ended normally but the lease had been lost, raises
    /// `LeaseLost`: what the block did was not protected to its end.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let released = block_on_settled(py, self.inner.release())?;
        match released {
            Err(e) if exc_type.is_none_or(|t| t.is_none()) => Err(to_py(e)),
            _ => Ok(false),
        }
    }
}

/// The lost signal of a sync `Lease` (`lease.lost`), in the style of `threading.Event`.
/// Holding it does not keep the lease held.
#[pyclass(module = "accord", frozen)]
pub struct LostSignal {
    signal: accord::LostSignal,
    /// The lease while its object lives: for the exact check against its deadline, and for
    /// G12 (a wait in a child process after fork() raises `Unsupported`).
    lease: Weak<accord::Lease>,
}

impl LostSignal {
    /// The lost signal of a lease this binding has no `Lease` object of (a member's, a
    /// shard's): its status is the signal's.
    pub fn detached(signal: accord::LostSignal) -> Self {
        LostSignal {
            signal,
            lease: Weak::new(),
        }
    }

    fn lost(&self) -> bool {
        match self.lease.upgrade() {
            Some(lease) => lease.is_lost(),
            None => self.signal.fired(),
        }
    }
}

#[pymethods]
impl LostSignal {
    /// True once the lease is lost (exact: checked against its deadline).
    fn is_set(&self) -> bool {
        self.lost()
    }

    fn __bool__(&self) -> bool {
        self.lost()
    }

    /// Blocks until the lease is lost or `timeout` seconds passed, and returns whether it is
    /// lost, as `threading.Event.wait` does. Unlike an event that may never be set, the wait
    /// also ends (False) once the lease ended otherwise: released, done, or its `Lease`
    /// dropped.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = convert::timeout("timeout", timeout)?;
        if let Some(lease) = self.lease.upgrade() {
            lease.check_process().py()?;
        }
        if self.lost() {
            return Ok(true);
        }
        let lost = wait_for_end(py, &self.signal, timeout)?;
        Ok(lost || self.lost())
    }

    fn __repr__(&self) -> String {
        format!(
            "<accord.LostSignal {}>",
            if self.lost() { "set" } else { "unset" }
        )
    }
}

/// A held key (asyncio API), renewed in the background until released, done or lost. Use it
/// with `async with` to release it at the end of a block; a lease dropped without release is
/// released in the background.
#[pyclass(module = "accord", frozen)]
pub struct AsyncLease {
    inner: Arc<accord::Lease>,
}

impl AsyncLease {
    pub fn new(inner: accord::Lease) -> Self {
        AsyncLease {
            inner: Arc::new(inner),
        }
    }
}

lease_class! {
    AsyncLease,
    /// An awaitable that completes when the lease is lost (or the client closes while
    /// holding it); it never completes for a lease that ends otherwise (released, done, or
    /// this object dropped). Use it with `asyncio.wait`, or await it in a task that stops
    /// the work.
    #[getter]
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.check_process().py()?;
        let signal = self.inner.lost_signal();
        // The core says when the lease ended; left pending unless it ended lost.
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

    /// Extends the lease by its ttl now, merging `metadata` into the key's metadata.
    #[pyo3(signature = (metadata=None))]
    fn renew<'py>(
        &self,
        py: Python<'py>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let metadata = convert::metadata("metadata", metadata)?;
        let lease = self.inner.clone();
        runtime::future_into_py(py, async move {
            match metadata {
                Some(m) => lease.renew_with_metadata(m).await,
                None => lease.renew().await,
            }
            .py()
        })
    }

    /// Releases the key and wakes its waiters (runs to its end even if the caller is
    /// cancelled). Releasing again is harmless; after the lease was lost this raises
    /// `LeaseLost`.
    fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lease = self.inner.clone();
        runtime::detached_into_py(py, async move { lease.release().await.py() })
    }

    /// Marks the key done (never granted again until `reset`), merging `metadata`, and
    /// releases it.
    #[pyo3(signature = (metadata=None))]
    fn done<'py>(
        &self,
        py: Python<'py>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let metadata = convert::metadata("metadata", metadata)?;
        let lease = self.inner.clone();
        runtime::detached_into_py(py, async move { lease.done(metadata).await.py() })
    }

    /// `Lease.fenced` for psycopg 3's `AsyncConnection` or `AsyncCursor`, or an asyncpg
    /// `Connection` (awaitable).
    fn fenced<'py>(
        slf: &Bound<'py, Self>,
        conn: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        fenced_py(slf.py(), "fenced_async")?.call1((slf, conn))
    }

    /// `Lease.done_in` for psycopg 3's `AsyncConnection` or `AsyncCursor`, or an asyncpg
    /// `Connection` (awaitable).
    #[pyo3(signature = (conn, metadata=None))]
    fn done_in<'py>(
        slf: &Bound<'py, Self>,
        conn: &Bound<'py, PyAny>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        fenced_py(slf.py(), "done_in_async")?.call1((slf, conn, metadata))
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio(slf.py(), "ready")?.call1((slf,))
    }

    /// Releases the lease. If the block ended normally but the lease had been lost, raises
    /// `LeaseLost`: what the block did was not protected to its end.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<&Bound<'py, PyAny>>,
        _exc: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let body_failed = exc_type.is_some_and(|t| !t.is_none());
        aio(py, "exit_lease")?.call1((self.release(py)?, body_failed))
    }
}
