//! Work pools and semaphores: `PoolCounts`, `Semaphore` (sync) and `AsyncSemaphore`
//! (asyncio), and the conversions of `offer` and `claim`. The rules (ranges, prefixes, waking,
//! permits) are the core's.

use std::future::Future;
use std::pin::pin;

use accord::{AcquireOptions, CancellationToken, ClaimOptions};
use pyo3::prelude::*;
use pyo3::types::PyCFunction;

use crate::client::acquire_options;
use crate::convert;
use crate::errors::IntoPyResult;
use crate::lease::{AsyncLease, Lease};
use crate::runtime::{self, aio, block_on, finish, GRACE};
use crate::types::py_str_repr;

/// The keys of an `offer`: any iterable of str (but not a str itself, which would offer its
/// characters).
pub fn keys(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    convert::strings("keys", "key", value)
}

/// The options of a `claim`; the limit's range is the core's.
pub fn claim_options(
    limit: i64,
    ttl: Option<f64>,
    timeout: Option<f64>,
    metadata: Option<&Bound<'_, PyAny>>,
) -> PyResult<ClaimOptions> {
    let mut options = ClaimOptions::new().limit(accord::limits::claim_limit(limit).py()?);
    if let Some(ttl) = convert::ttl("ttl", ttl)? {
        options = options.ttl(ttl);
    }
    if let Some(timeout) = convert::timeout("timeout", timeout)? {
        options = options.timeout(timeout);
    }
    if let Some(metadata) = convert::metadata("metadata", metadata)? {
        options = options.metadata(metadata);
    }
    Ok(options)
}

/// What a call that grants leases returns: one lease, or a batch.
pub trait Grants: Send {
    fn leases(&self) -> &[accord::Lease];
}

impl Grants for accord::Lease {
    fn leases(&self) -> &[accord::Lease] {
        std::slice::from_ref(self)
    }
}

impl Grants for Vec<accord::Lease> {
    fn leases(&self) -> &[accord::Lease] {
        self
    }
}

/// Runs a call that may grant leases (acquire, claim, a semaphore's acquire) with the GIL
/// released. When Ctrl-C interrupts it, `cancel` stops the core's wait and whatever it granted
/// in the meantime is released before the interrupt is raised: nothing is left held.
pub fn block_on_grants<F, G>(py: Python<'_>, cancel: &CancellationToken, granting: F) -> PyResult<G>
where
    F: Future<Output = accord::Result<G>> + Send,
    G: Grants,
{
    let mut granting = pin!(granting);
    let granted = match block_on(py, granting.as_mut()) {
        Ok(granted) => granted.py()?,
        Err(interrupt) => {
            cancel.cancel();
            if let Some(Ok(granted)) = finish(py, granting, GRACE) {
                release_all(py, granted.leases());
            }
            return Err(interrupt);
        }
    };
    // An interrupt that arrived while the grants came back: release, then raise.
    if let Err(interrupt) = py.check_signals() {
        release_all(py, granted.leases());
        return Err(interrupt);
    }
    Ok(granted)
}

fn release_all(py: Python<'_>, leases: &[accord::Lease]) {
    finish(
        py,
        async {
            for lease in leases {
                let _ = lease.release().await;
            }
        },
        GRACE,
    );
}

/// How many keys of a work pool are free (claimable now: never granted, released or
/// expired), held by a live lease, and done, by the coordinator's clock.
#[pyclass(module = "accord", frozen, eq, hash, from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PoolCounts {
    #[pyo3(get)]
    free: u64,
    #[pyo3(get)]
    held: u64,
    #[pyo3(get)]
    done: u64,
}

impl From<accord::PoolCounts> for PoolCounts {
    fn from(c: accord::PoolCounts) -> Self {
        PoolCounts {
            free: c.free,
            held: c.held,
            done: c.done,
        }
    }
}

#[pymethods]
impl PoolCounts {
    #[new]
    #[pyo3(signature = (free=0, held=0, done=0))]
    fn new(free: u64, held: u64, done: u64) -> Self {
        PoolCounts { free, held, done }
    }

    #[classattr]
    fn __match_args__() -> (&'static str, &'static str, &'static str) {
        ("free", "held", "done")
    }

    /// Every key of the pool: free + held + done.
    #[getter]
    fn total(&self) -> u64 {
        accord::PoolCounts {
            free: self.free,
            held: self.held,
            done: self.done,
        }
        .total()
    }

    fn __repr__(&self) -> String {
        format!(
            "PoolCounts(free={}, held={}, done={})",
            self.free, self.held, self.done
        )
    }
}

fn repr(class: &str, semaphore: &accord::Semaphore) -> String {
    format!(
        "<accord.{class} name={} limit={}>",
        py_str_repr(semaphore.name()),
        semaphore.limit()
    )
}

/// At most `limit` holders of a name at once (sync API); open it with `Client.semaphore`.
/// Each holder has an ordinary `Lease` on one permit key (`<name>#00000` …): fence,
/// keepalive, lost signal, release. Open every handle of a name with the same limit.
#[pyclass(module = "accord", frozen)]
pub struct Semaphore {
    inner: accord::Semaphore,
}

impl Semaphore {
    pub fn new(inner: accord::Semaphore) -> Self {
        Semaphore { inner }
    }
}

#[pymethods]
impl Semaphore {
    /// The semaphore's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The number of permits this handle takes from.
    #[getter]
    fn limit(&self) -> usize {
        self.inner.limit()
    }

    /// Waits for a permit and returns its lease. Raises `Timeout` after `timeout` seconds
    /// (None: wait without a limit), `Closed` if the client closes. Ctrl-C interrupts the
    /// wait; in every failure nothing is left held.
    #[pyo3(signature = (timeout=None, *, ttl=None, metadata=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        ttl: Option<f64>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Lease> {
        let cancel = CancellationToken::new();
        let options = acquire_options(ttl, timeout, metadata)?.cancel(cancel.clone());
        let lease = block_on_grants(py, &cancel, self.inner.acquire(options))?;
        Ok(Lease::new(lease))
    }

    /// A permit's lease if one is free now, None at once if all `limit` are held.
    #[pyo3(signature = (*, ttl=None, metadata=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        ttl: Option<f64>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Lease>> {
        let options = acquire_options(ttl, None, metadata)?;
        let acquired = block_on(py, self.inner.try_acquire(options))?.py()?;
        Ok(acquired.map(Lease::new))
    }

    fn __repr__(&self) -> String {
        repr("Semaphore", &self.inner)
    }
}

/// At most `limit` holders of a name at once (asyncio API); open it with
/// `await AsyncClient.semaphore(name, limit)`. Each holder has an ordinary `AsyncLease`.
#[pyclass(module = "accord", frozen)]
pub struct AsyncSemaphore {
    inner: accord::Semaphore,
}

impl AsyncSemaphore {
    pub fn new(inner: accord::Semaphore) -> Self {
        AsyncSemaphore { inner }
    }
}

#[pymethods]
impl AsyncSemaphore {
    /// The semaphore's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The number of permits this handle takes from.
    #[getter]
    fn limit(&self) -> usize {
        self.inner.limit()
    }

    /// Waits for a permit and returns its lease: await it, or use it with `async with`.
    /// Raises `Timeout` after `timeout` seconds (None: wait without a limit) or `Closed`. A
    /// cancelled acquire raises `CancelledError` only once nothing it may have been granted
    /// is held.
    #[pyo3(signature = (timeout=None, *, ttl=None, metadata=None))]
    fn acquire<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        ttl: Option<f64>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = acquire_options(ttl, timeout, metadata)?;
        let semaphore = self.inner.clone();
        crate::client::opening(py, move |py| {
            let cancel = CancellationToken::new();
            let semaphore = semaphore.clone();
            let options: AcquireOptions = options.clone().cancel(cancel.clone());
            let acquiring = runtime::future_into_py(py, async move {
                semaphore.acquire(options).await.py().map(AsyncLease::new)
            })?;
            let cancel = PyCFunction::new_closure(py, None, None, move |_args, _kwargs| {
                cancel.cancel();
            })?;
            Ok(aio(py, "settle")?.call1((acquiring, cancel))?.unbind())
        })
    }

    /// A permit's lease if one is free now, None at once if all `limit` are held.
    #[pyo3(signature = (*, ttl=None, metadata=None))]
    fn try_acquire<'py>(
        &self,
        py: Python<'py>,
        ttl: Option<f64>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = acquire_options(ttl, None, metadata)?;
        let semaphore = self.inner.clone();
        runtime::future_into_py(py, async move {
            let acquired = semaphore.try_acquire(options).await.py()?;
            Ok(acquired.map(AsyncLease::new))
        })
    }

    fn __repr__(&self) -> String {
        repr("AsyncSemaphore", &self.inner)
    }
}
