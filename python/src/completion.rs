//! asyncio futures completed by the accord runtime through one pipe per event loop.
//!
//! A call of the async API makes an asyncio future and runs its Rust future on the runtime.
//! When that finishes, the runtime thread queues the result and, if the queue was empty,
//! writes one byte to the loop's pipe; the loop's reader (`Completer.drain`, registered with
//! `loop.add_reader` by `accord._aio.new_future`) converts the results and settles the futures
//! with the GIL it already holds. So no runtime thread ever takes the GIL or calls into the
//! loop, a burst of completions costs one wakeup, and nothing is left for the interpreter's
//! exit to wait for. (pyo3-async-runtimes' generic bridge, used before, hands each result to a
//! blocking-pool thread that takes the GIL and calls `call_soon_threadsafe`: two more thread
//! hops per call, which made the async client twice as slow as the sync one.)

use std::collections::HashMap;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use accord::CancellationToken;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;
use pyo3::IntoPyObjectExt;

use crate::runtime::{aio, runtime};

/// Converts a finished call's output to Python, on the loop's thread.
type Completion = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// The runtime's side: finished calls, and the pipe that wakes the loop. `None`: the asyncio
/// future was cancelled and its Rust future dropped, or the call ended without an answer.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    finished: Mutex<Vec<(u64, Option<Completion>)>>,
}

impl Pipe {
    fn new() -> PyResult<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array it is given; both are owned below.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(PyOSError::new_err(format!(
                "accord: cannot make the asyncio completion pipe: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: fresh descriptors owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for fd in [&read, &write] {
            // SAFETY: fcntl on a descriptor this function owns.
            unsafe {
                let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        Ok(Pipe {
            read,
            write,
            finished: Mutex::new(Vec::new()),
        })
    }

    fn push(&self, id: u64, completion: Option<Completion>) {
        let was_empty = {
            let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
            finished.push((id, completion));
            finished.len() == 1
        };
        if was_empty {
            // A full pipe (EAGAIN) already has the loop's reader due: nothing is lost.
            // SAFETY: writes one byte from a live buffer to a descriptor this pipe owns.
            unsafe { libc::write(self.write.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        }
    }

    fn take(&self) -> Vec<(u64, Option<Completion>)> {
        let mut buf = [0u8; 256];
        // SAFETY: reads into a live buffer of the length given, from a descriptor owned here.
        while unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {
        }
        std::mem::take(&mut *self.finished.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The completions of one event loop (made and registered by `accord._aio.new_future`).
#[pyclass(frozen, module = "accord._accord")]
pub struct Completer {
    pipe: Arc<Pipe>,
    /// The asyncio futures of calls in flight, by id; only touched with the GIL. Weak: a
    /// future nobody awaits any more is not kept (nor, through it, its loop, which would keep
    /// this completer and its pipe alive after the loop closed).
    pending: Mutex<HashMap<u64, Py<PyWeakrefReference>>>,
    next_id: AtomicU64,
    /// The process that made it: a forked child must not share the parent's pipe.
    #[pyo3(get)]
    pid: u32,
}

#[pymethods]
impl Completer {
    #[new]
    fn new() -> PyResult<Completer> {
        Ok(Completer {
            pipe: Arc::new(Pipe::new()?),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            pid: std::process::id(),
        })
    }

    /// The descriptor the loop watches.
    #[getter]
    fn fd(&self) -> i32 {
        self.pipe.read.as_raw_fd()
    }

    /// Settles the futures of every finished call (the loop's reader callback). Every one of
    /// the batch is settled even if one fails (no byte will come again for them); the first
    /// failure is raised after.
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let mut first_failure = None;
        for (id, completion) in self.pipe.take() {
            let future = self
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id)
                .and_then(|weak| weak.bind(py).upgrade());
            let (Some(future), Some(completion)) = (future, completion) else {
                continue; // dropped by its caller, or cancelled
            };
            if let Err(e) = settle(py, &future, completion) {
                first_failure.get_or_insert(e);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }
}

fn settle(py: Python<'_>, future: &Bound<'_, PyAny>, completion: Completion) -> PyResult<()> {
    if future.call_method0("done")?.is_truthy()? {
        return Ok(()); // cancelled by its caller meanwhile
    }
    match completion(py) {
        Ok(value) => future.call_method1("set_result", (value,))?,
        Err(error) => future.call_method1("set_exception", (error.into_value(py),))?,
    };
    Ok(())
}

/// An asyncio future's done callback: cancelling the future drops the Rust future.
#[pyclass(frozen, module = "accord._accord")]
struct CancelOnDone(CancellationToken);

#[pymethods]
impl CancelOnDone {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.0.cancel();
    }
}

/// An asyncio future (of the running loop) for `fut`, which runs on the accord runtime.
/// `cancellable`: cancelling the asyncio future drops `fut`; otherwise `fut` runs to its end
/// whatever becomes of the asyncio future (release, done, close).
pub fn future_into_py<'py, F, T>(
    py: Python<'py>,
    fut: F,
    cancellable: bool,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    future_into_py_unless(py, async move { Some(fut.await) }, cancellable)
}

/// Like [`future_into_py`], but `fut` answering `None` leaves the asyncio future pending (for
/// waits that end without an answer, as a lease's `lost` when the lease object goes away).
pub fn future_into_py_unless<'py, F, T>(
    py: Python<'py>,
    fut: F,
    cancellable: bool,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Option<PyResult<T>>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let made = aio(py, "new_future")?.call0()?;
    let (completer, future): (Bound<'py, Completer>, Bound<'py, PyAny>) = made.extract()?;
    let completer = completer.get();
    let id = completer.next_id.fetch_add(1, Ordering::Relaxed);
    completer
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(id, PyWeakrefReference::new(&future)?.unbind());
    let cancel = CancellationToken::new();
    if cancellable {
        future.call_method1("add_done_callback", (CancelOnDone(cancel.clone()),))?;
    }
    let pipe = completer.pipe.clone();
    runtime().spawn(async move {
        let output = tokio::select! {
            output = fut => output,
            _ = cancel.cancelled() => None,
        };
        let completion = output.map(|output| -> Completion {
            Box::new(move |py| output.and_then(|value| value.into_py_any(py)))
        });
        pipe.push(id, completion);
    });
    Ok(future)
}
