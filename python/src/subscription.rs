//! `Subscription` (sync iterator) and `AsyncSubscription` (async iterator): notifications on
//! one or more channels, and `Reconnected` when some may have been missed.

use std::sync::{Arc, Mutex, PoisonError};

use accord::CancellationToken;
use pyo3::prelude::*;

use crate::convert;
use crate::errors::{IntoPyResult, Timeout};
use crate::runtime::{self, aio, block_on, block_on_settled};
use crate::types::{py_str_repr, Event};

/// Notifications on one or more channels (sync API): iterate it, or call `recv`.
#[pyclass(module = "accord", frozen)]
pub struct Subscription {
    inner: accord::Subscription,
}

impl Subscription {
    pub fn new(inner: accord::Subscription) -> Self {
        Subscription { inner }
    }

    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Event>> {
        let limit = convert::timeout("timeout", timeout)?;
        let sub = &self.inner;
        // Polled on this thread and dropped on timeout or Ctrl-C: recv is cancel-safe, so no
        // notification is lost.
        let received = block_on(py, async move {
            match limit {
                Some(t) => tokio::time::timeout(t, sub.recv()).await.ok(),
                None => Some(sub.recv().await),
            }
        })?;
        match received {
            Some(r) => Ok(r.py()?.map(Event::from)),
            None => Err(Timeout::new_err(format!(
                "no notification within {} s",
                timeout.unwrap_or_default()
            ))),
        }
    }
}

#[pymethods]
impl Subscription {
    /// The channels this subscription receives.
    #[getter]
    fn channels(&self) -> Vec<String> {
        self.inner.channels().to_vec()
    }

    /// True once closed (by `close` or by closing the client).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The next event (`Message` or `Reconnected`); None once this subscription is closed.
    /// Raises `Timeout` after `timeout` seconds without one, `Closed` once the client closed.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Event>> {
        self.next(py, timeout)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Event>> {
        self.next(py, None)
    }

    /// Stops delivery (a blocked read returns) and UNLISTENs channels no other subscription of
    /// the client needs. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        block_on_settled(py, self.inner.close())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        repr("Subscription", &self.inner)
    }
}

fn repr(class: &str, sub: &accord::Subscription) -> String {
    let channels: Vec<String> = sub.channels().iter().map(|c| py_str_repr(c)).collect();
    format!(
        "<accord.{class} channels=[{}]{}>",
        channels.join(", "),
        if sub.is_closed() { " closed" } else { "" }
    )
}

/// Notifications on one or more channels (asyncio API): `async for`, or `await recv()`.
#[pyclass(module = "accord", frozen)]
pub struct AsyncSubscription {
    inner: Arc<accord::Subscription>,
    /// A read whose caller was cancelled or timed out: it answers the next read, so that the
    /// notification it may already hold is not lost.
    pending: Mutex<Option<Py<PyAny>>>,
    /// Ends a pending read when this object goes away.
    gone: CancellationToken,
}

impl AsyncSubscription {
    pub fn new(inner: accord::Subscription) -> Self {
        AsyncSubscription {
            inner: Arc::new(inner),
            pending: Mutex::new(None),
            gone: CancellationToken::new(),
        }
    }
}

impl Drop for AsyncSubscription {
    fn drop(&mut self) {
        self.gone.cancel();
    }
}

#[pymethods]
impl AsyncSubscription {
    /// The channels this subscription receives.
    #[getter]
    fn channels(&self) -> Vec<String> {
        self.inner.channels().to_vec()
    }

    /// True once closed (by `close` or by closing the client).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The read in flight, or a new one. (For accord._aio.)
    fn _next_future<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(future) = pending {
            return Ok(future.into_bound(py));
        }
        let sub = self.inner.clone();
        let gone = self.gone.clone();
        runtime::future_into_py(py, async move {
            tokio::select! {
                r = sub.recv() => Ok(r.py()?.map(Event::from)),
                _ = gone.cancelled() => Ok(None),
            }
        })
    }

    /// Keeps a read for the next call. (For accord._aio.)
    fn _keep(&self, future: Py<PyAny>) {
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(future);
    }

    /// The next event (`Message` or `Reconnected`); None once this subscription is closed.
    /// Raises `Timeout` after `timeout` seconds without one, `Closed` once the client closed.
    #[pyo3(signature = (timeout=None))]
    fn recv<'py>(slf: &Bound<'py, Self>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let limit = convert::timeout("timeout", timeout)?;
        let timeout = limit.map(|_| timeout.unwrap_or_default());
        aio(slf.py(), "next_event")?.call1((slf, timeout, false))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio(slf.py(), "next_event")?.call1((slf, slf.py().None(), true))
    }

    /// Stops delivery (a waiting read returns) and UNLISTENs channels no other subscription of
    /// the client needs. Idempotent.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let sub = self.inner.clone();
        runtime::detached_into_py(py, async move {
            sub.close().await;
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
        _args: &Bound<'py, pyo3::types::PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio(py, "exit_closing")?.call1((self.close(py)?,))
    }

    fn __repr__(&self) -> String {
        repr("AsyncSubscription", &self.inner)
    }
}
