//! `Lease` (sync) and `AsyncLease` (asyncio): a held key, renewed in the background by the
//! core until released, done or lost.

use std::sync::Arc;

use accord::CancellationToken;
use chrono::{DateTime, Utc};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert;
use crate::errors::{to_py, IntoPyResult};
use crate::runtime::{self, aio, block_on, block_on_settled};
use crate::types::py_str_repr;

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
            /// True once the lease is lost (exact: checked against its deadline).
            #[getter]
            fn is_lost(&self) -> bool {
                self.inner.is_lost()
            }
            fn __repr__(&self) -> String {
                format!(
                    "<accord.{} key={} fence={} owner={}{}>",
                    stringify!($name),
                    py_str_repr(self.inner.key()),
                    self.inner.fence(),
                    py_str_repr(self.inner.owner()),
                    if self.inner.is_lost() { " lost" } else { "" },
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
}

impl Lease {
    pub fn new(inner: accord::Lease) -> Self {
        Lease {
            inner: Arc::new(inner),
        }
    }
}

lease_class! {
    Lease,
    /// True once the lease is lost: stop acting on what it protects.
    #[getter]
    fn lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Blocks until the lease is lost or `timeout` seconds passed; returns whether it is lost.
    /// A lease released or done normally is never lost.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = convert::timeout("timeout", timeout)?;
        self.inner.check_process().py()?;
        if self.inner.is_lost() {
            return Ok(true);
        }
        let signal = self.inner.lost_signal();
        let fired = block_on(py, async {
            match timeout {
                Some(t) => tokio::time::timeout(t, signal.wait()).await.is_ok(),
                None => {
                    signal.wait().await;
                    true
                }
            }
        })?;
        Ok(fired || self.inner.is_lost())
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

/// A held key (asyncio API), renewed in the background until released, done or lost. Use it
/// with `async with` to release it at the end of a block; a lease dropped without release is
/// released in the background.
#[pyclass(module = "accord", frozen)]
pub struct AsyncLease {
    inner: Arc<accord::Lease>,
    /// Ends the `lost` waits when this object goes away.
    gone: CancellationToken,
}

impl AsyncLease {
    pub fn new(inner: accord::Lease) -> Self {
        AsyncLease {
            inner: Arc::new(inner),
            gone: CancellationToken::new(),
        }
    }
}

impl Drop for AsyncLease {
    fn drop(&mut self) {
        self.gone.cancel();
    }
}

lease_class! {
    AsyncLease,
    /// An awaitable that completes when the lease is lost (or the client closes while
    /// holding it); it never completes for a lease released or done normally. Use it with
    /// `asyncio.wait`, or await it in a task that stops the work.
    #[getter]
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.check_process().py()?;
        let signal = self.inner.lost_signal();
        let gone = self.gone.clone();
        // Never settled if the lease object goes away first (the task then ends).
        crate::completion::future_into_py_unless(
            py,
            async move {
                tokio::select! {
                    _ = signal.wait() => Some(Ok(())),
                    _ = gone.cancelled() => None,
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
