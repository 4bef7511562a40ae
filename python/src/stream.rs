//! Durable streams: `StreamSubscription` (sync iterator) and `AsyncStreamSubscription` (async
//! iterator) of a stream's events, the records `StreamEvent` and `StreamInfo`, and the
//! conversions of `subscribe` and `set_stream_retention`. The rules (seqs, start positions,
//! acks, retention, limits) are the core's.

use std::sync::{Arc, Mutex, PoisonError};

use accord::{CancellationToken, StreamRetention, StreamStart, SubscribeOptions};
use chrono::{DateTime, Utc};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString, PyTuple};

use crate::convert;
use crate::errors::{IntoPyResult, Timeout};
use crate::runtime::{self, aio, block_on, block_on_settled};
use crate::types::py_str_repr;

/// The default of `subscribe(page_size=)`: the core's, written out in the text signatures
/// (and the stubs), which this checks.
pub const DEFAULT_PAGE_SIZE: i64 = 100;
const _: () = assert!(accord::DEFAULT_PAGE_SIZE as i64 == DEFAULT_PAGE_SIZE);

/// `subscribe(after=)`: "latest", "earliest", or a seq (the subscription starts after it),
/// read by the core's `StreamStart::parse` / `StreamStart::after`.
pub struct After(StreamStart);

impl After {
    /// The default: the next event published.
    pub const LATEST: After = After(StreamStart::Latest);
}

impl<'a, 'py> FromPyObject<'a, 'py> for After {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.cast::<PyString>() {
            return Ok(After(
                StreamStart::parse("after", &convert::text("after", &s)?).py()?,
            ));
        }
        // A bool is an int to Python, but True is no seq.
        if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
            return Ok(After(
                StreamStart::after("after", convert::integer("after", &obj)?).py()?,
            ));
        }
        Err(PyTypeError::new_err(format!(
            "after must be \"latest\", \"earliest\" or an int (a seq), not {}",
            convert::type_name(&obj)
        )))
    }
}

/// The options of a `subscribe`; every check is the core's.
pub fn subscribe_options(
    after: After,
    consumer: Option<String>,
    page_size: i64,
) -> PyResult<SubscribeOptions> {
    let mut options = SubscribeOptions::new()
        .start(after.0)
        .page_size(accord::limits::page_size(page_size).py()?);
    if let Some(consumer) = consumer {
        options = options.consumer(consumer);
    }
    Ok(options)
}

/// The rule of a `set_stream_retention`: None for no bound; `max_age` in seconds. The ranges
/// (max_len ≥ 1, max_age ≥ 100 ms) are the core's.
pub fn retention(max_len: Option<i64>, max_age: Option<f64>) -> PyResult<StreamRetention> {
    let mut retention = StreamRetention::new();
    if let Some(n) = max_len {
        retention = retention.max_len(accord::limits::stream_max_len(n).py()?);
    }
    if let Some(age) = convert::duration("max_age", max_age)? {
        retention = retention.max_age(age);
    }
    Ok(retention)
}

/// One event of a stream.
#[pyclass(module = "accord", frozen, eq, hash, from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StreamEvent {
    /// The stream it was published to.
    #[pyo3(get)]
    stream: String,
    /// Its place in the stream: 1 for the first event, one more for each after it.
    #[pyo3(get)]
    seq: i64,
    /// What the publisher sent.
    #[pyo3(get)]
    payload: String,
    /// When the coordinator stored it (its clock; timezone-aware, UTC).
    #[pyo3(get)]
    published_at: DateTime<Utc>,
}

impl From<accord::StreamEvent> for StreamEvent {
    fn from(e: accord::StreamEvent) -> Self {
        StreamEvent {
            stream: e.stream,
            seq: e.seq,
            payload: e.payload,
            published_at: e.published_at,
        }
    }
}

#[pymethods]
impl StreamEvent {
    #[new]
    fn new(
        #[pyo3(from_py_with = convert::stream)] stream: String,
        #[pyo3(from_py_with = convert::seq)] seq: i64,
        payload: String,
        published_at: DateTime<Utc>,
    ) -> Self {
        StreamEvent {
            stream,
            seq,
            payload,
            published_at,
        }
    }

    #[classattr]
    fn __match_args__() -> (&'static str, &'static str, &'static str, &'static str) {
        ("stream", "seq", "payload", "published_at")
    }

    fn __repr__(&self) -> String {
        format!(
            "StreamEvent(stream={}, seq={}, payload={}, published_at={})",
            py_str_repr(&self.stream),
            self.seq,
            py_str_repr(&self.payload),
            self.published_at.to_rfc3339()
        )
    }
}

/// A stream's bounds and retention rule.
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct StreamInfo(accord::StreamInfo);

impl From<accord::StreamInfo> for StreamInfo {
    fn from(info: accord::StreamInfo) -> Self {
        StreamInfo(info)
    }
}

#[pymethods]
impl StreamInfo {
    /// The stream's name.
    #[getter]
    fn stream(&self) -> &str {
        &self.0.stream
    }
    /// The oldest seq still stored; `last_seq + 1` when none is.
    #[getter]
    fn first_seq(&self) -> i64 {
        self.0.first_seq
    }
    /// The newest seq published (0: nothing ever was).
    #[getter]
    fn last_seq(&self) -> i64 {
        self.0.last_seq
    }
    /// Keeps at most this many of the newest events; None: no bound.
    #[getter]
    fn max_len(&self) -> Option<u64> {
        self.0.retention.max_len
    }
    /// Keeps events at most this many seconds; None: no bound.
    #[getter]
    fn max_age(&self) -> Option<f64> {
        self.0.retention.max_age.map(|d| d.as_secs_f64())
    }

    fn __repr__(&self) -> String {
        let none = || "None".to_string();
        format!(
            "StreamInfo(stream={}, first_seq={}, last_seq={}, max_len={}, max_age={})",
            py_str_repr(&self.0.stream),
            self.0.first_seq,
            self.0.last_seq,
            self.max_len().map_or_else(none, |n| n.to_string()),
            self.max_age().map_or_else(none, |s| format!("{s:?}")),
        )
    }
}

fn repr(class: &str, sub: &accord::StreamSubscription) -> String {
    format!(
        "<accord.{class} stream={}{} position={}{}>",
        py_str_repr(sub.stream()),
        sub.consumer()
            .map(|c| format!(" consumer={}", py_str_repr(c)))
            .unwrap_or_default(),
        sub.position(),
        if sub.is_closed() { " closed" } else { "" }
    )
}

/// The events of one stream (sync API): iterate it (it ends once closed), or call `next`.
/// Open it with `Client.subscribe`.
#[pyclass(module = "accord", frozen)]
pub struct StreamSubscription {
    inner: accord::StreamSubscription,
}

impl StreamSubscription {
    pub fn new(inner: accord::StreamSubscription) -> Self {
        StreamSubscription { inner }
    }

    fn read(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<StreamEvent>> {
        let limit = convert::timeout("timeout", timeout)?;
        let sub = &self.inner;
        // Polled on this thread and dropped on timeout or Ctrl-C: the core's next is
        // cancel-safe, so no event is skipped.
        let read = block_on(py, async move {
            match limit {
                Some(t) => tokio::time::timeout(t, sub.next()).await.ok(),
                None => Some(sub.next().await),
            }
        })?;
        match read {
            Some(r) => Ok(r.py()?.map(StreamEvent::from)),
            None => Err(Timeout::new_err(format!(
                "no event within {} s",
                timeout.unwrap_or_default()
            ))),
        }
    }
}

#[pymethods]
impl StreamSubscription {
    /// The stream this subscription reads.
    #[getter]
    fn stream(&self) -> &str {
        self.inner.stream()
    }

    /// The named consumer, if any.
    #[getter]
    fn consumer(&self) -> Option<&str> {
        self.inner.consumer()
    }

    /// The seq of the last event delivered (before the first: where the subscription started).
    #[getter]
    fn position(&self) -> i64 {
        self.inner.position()
    }

    /// True once closed (by `close` or by closing the client).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The next event, waiting for one to be published; None once this subscription is
    /// closed. Raises `Timeout` after `timeout` seconds without one, `Closed` once the client
    /// closed, `Trimmed` when retention deleted events not read yet (the subscription then
    /// ends). Ctrl-C interrupts the wait; no event is skipped.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<StreamEvent>> {
        self.read(py, timeout)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<StreamEvent>> {
        self.read(py, None)
    }

    /// Stores the named consumer's position: a later subscription of the consumer (in any
    /// process and language) starts after `seq`. Positions only move forward. Raises
    /// `InvalidArgument` without a consumer, or for a seq this subscription has not delivered.
    fn ack(&self, py: Python<'_>, #[pyo3(from_py_with = convert::seq)] seq: i64) -> PyResult<()> {
        block_on(py, self.inner.ack(seq))?.py()
    }

    /// Stops reading (a waiting `next` returns None) and listening. Idempotent.
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
        repr("StreamSubscription", &self.inner)
    }
}

/// The events of one stream (asyncio API): `async for` (it ends once closed), or
/// `await next()`. Open it with `AsyncClient.subscribe`.
#[pyclass(module = "accord", frozen)]
pub struct AsyncStreamSubscription {
    inner: Arc<accord::StreamSubscription>,
    /// A read whose caller was cancelled or timed out: it answers the next read, so that the
    /// event it may already have taken from the core is not lost.
    pending: Mutex<Option<Py<PyAny>>>,
    /// Ends a pending read when this object goes away.
    gone: CancellationToken,
}

impl AsyncStreamSubscription {
    pub fn new(inner: accord::StreamSubscription) -> Self {
        AsyncStreamSubscription {
            inner: Arc::new(inner),
            pending: Mutex::new(None),
            gone: CancellationToken::new(),
        }
    }
}

impl Drop for AsyncStreamSubscription {
    fn drop(&mut self) {
        self.gone.cancel();
    }
}

#[pymethods]
impl AsyncStreamSubscription {
    /// The stream this subscription reads.
    #[getter]
    fn stream(&self) -> &str {
        self.inner.stream()
    }

    /// The named consumer, if any.
    #[getter]
    fn consumer(&self) -> Option<&str> {
        self.inner.consumer()
    }

    /// The seq of the last event delivered (before the first: where the subscription started).
    #[getter]
    fn position(&self) -> i64 {
        self.inner.position()
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
                r = sub.next() => Ok(r.py()?.map(StreamEvent::from)),
                _ = gone.cancelled() => Ok(None),
            }
        })
    }

    /// Keeps a read for the next call. (For accord._aio.)
    fn _keep(&self, future: Py<PyAny>) {
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(future);
    }

    /// The next event; None once this subscription is closed. Raises `Timeout` after
    /// `timeout` seconds without one, `Closed` once the client closed, `Trimmed` when retention
    /// deleted events not read yet. A cancelled read loses no event.
    #[pyo3(signature = (timeout=None))]
    fn next<'py>(slf: &Bound<'py, Self>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let limit = convert::timeout("timeout", timeout)?;
        let timeout = limit.map(|_| timeout.unwrap_or_default());
        aio(slf.py(), "next_event")?.call1((slf, timeout, false, "event"))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio(slf.py(), "next_event")?.call1((slf, slf.py().None(), true, "event"))
    }

    /// Stores the named consumer's position; see `StreamSubscription.ack`.
    fn ack<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::seq)] seq: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sub = self.inner.clone();
        runtime::future_into_py(py, async move { sub.ack(seq).await.py() })
    }

    /// Stops reading (a waiting `next` returns None) and listening. Idempotent.
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
        _args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio(py, "exit_closing")?.call1((self.close(py)?,))
    }

    fn __repr__(&self) -> String {
        repr("AsyncStreamSubscription", &self.inner)
    }
}
