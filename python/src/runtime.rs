//! The one tokio runtime of the process, created lazily and again in a forked child, and the
//! two ways Python waits on it: blocking with the GIL released (the sync API) and asyncio
//! futures (the async API, completed through the loop's pipe: see `completion.rs`).

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tokio::runtime::Runtime;

/// How often a blocking call wakes up to let Python run its signal handlers (Ctrl-C).
const TICK: Duration = Duration::from_millis(50);
/// How long an interrupted call may take to finish its clean-up before the interrupt is raised.
pub const GRACE: Duration = Duration::from_secs(2);

struct Current {
    pid: u32,
    runtime: Runtime,
}

static CURRENT: AtomicPtr<Current> = AtomicPtr::new(std::ptr::null_mut());
static BUILDING: Mutex<()> = Mutex::new(());

/// The runtime of this process. A child made by `fork()` inherits the parent's runtime without
/// its threads, so it gets a new one (the inherited one is left alone: dropping it would wait
/// for threads that do not exist in the child).
pub fn runtime() -> &'static Runtime {
    let pid = std::process::id();
    let current = CURRENT.load(Ordering::Acquire);
    // SAFETY: a published `Current` is leaked, so it lives for the rest of the process.
    if let Some(current) = unsafe { current.as_ref() } {
        if current.pid == pid {
            return &current.runtime;
        }
    }
    build(pid)
}

#[cold]
fn build(pid: u32) -> &'static Runtime {
    let _building = BUILDING.lock().unwrap_or_else(PoisonError::into_inner);
    // SAFETY: as above.
    if let Some(current) = unsafe { CURRENT.load(Ordering::Acquire).as_ref() } {
        if current.pid == pid {
            return &current.runtime;
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::thread::available_parallelism()
                .map(|n| n.get().clamp(2, 4))
                .unwrap_or(2),
        )
        .thread_name("accord-runtime")
        .on_thread_start(leave_signals_to_python)
        .enable_all()
        .build()
        .expect("accord: cannot start its tokio runtime");
    let current: &'static Current = Box::leak(Box::new(Current { pid, runtime }));
    CURRENT.store(current as *const Current as *mut Current, Ordering::Release);
    &current.runtime
}

/// Process-directed signals (Ctrl-C's SIGINT, SIGTERM, …) must reach a thread that Python
/// handles them in: delivered to one of the runtime's threads, they would set Python's flag
/// without interrupting what the main thread is blocked in (a `time.sleep`, say). So the
/// runtime's threads block every signal but the synchronous ones (faults).
pub(crate) fn leave_signals_to_python() {
    #[cfg(unix)]
    // SAFETY: plain libc calls on a local, initialized signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for fault in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
            libc::SIGABRT,
        ] {
            libc::sigdelset(&mut set, fault);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Runs `fut` to completion on the calling thread with the GIL released, waking every
/// [`TICK`] to run Python's signal handlers. When one raises (Ctrl-C: `KeyboardInterrupt`),
/// the future is dropped and the exception returned; the core's futures are drop-safe.
pub fn block_on<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime();
    let mut fut = pin!(fut);
    let _busy = Busy::enter();
    loop {
        let polled = py.detach(|| {
            runtime.block_on(async { tokio::time::timeout(TICK, fut.as_mut()).await.ok() })
        });
        if let Some(output) = polled {
            return Ok(output);
        }
        py.check_signals()?;
        if interpreter_exiting() {
            return Err(PyRuntimeError::new_err(
                "accord: the Python interpreter is shutting down; this wait was abandoned",
            ));
        }
    }
}

/// Like [`block_on`], but after an interrupt `fut` may finish (for up to [`GRACE`]) before
/// the exception is raised: for calls that should not be cut in half (release, done, close).
pub fn block_on_settled<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let mut fut = pin!(fut);
    match block_on(py, fut.as_mut()) {
        Ok(output) => Ok(output),
        Err(interrupt) => {
            finish(py, fut, GRACE);
            Err(interrupt)
        }
    }
}

/// Drives `fut` for at most `grace` with the GIL released and without looking at signals: the
/// clean-up after an interrupt. `None` if it did not finish in time (it is then dropped, and
/// the core finishes its clean-up in the background).
pub fn finish<F>(py: Python<'_>, fut: F, grace: Duration) -> Option<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime();
    py.detach(|| runtime.block_on(async { tokio::time::timeout(grace, fut).await.ok() }))
}

/// Threads in a blocking call of this module, which will run Python code again when it ends.
/// (No runtime thread ever takes the GIL: asyncio futures are settled on their loops, see
/// `completion.rs`.)
static BUSY: AtomicUsize = AtomicUsize::new(0);
/// Set by [`at_exit`]: Python is about to finalize.
static EXITING: AtomicBool = AtomicBool::new(false);

struct Busy;

impl Busy {
    fn enter() -> Busy {
        BUSY.fetch_add(1, Ordering::SeqCst);
        Busy
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.fetch_sub(1, Ordering::SeqCst);
    }
}

/// True once the interpreter is exiting, for every thread but the one running the exit.
fn interpreter_exiting() -> bool {
    EXITING.load(Ordering::SeqCst) && !EXIT_THREAD.with(|t| t.get())
}

thread_local! {
    static EXIT_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Registered with `atexit`. A thread that takes the GIL after Python started finalizing is
/// ended in the middle of what it does, which Rust code cannot survive; so before that, waits
/// (with the GIL released, up to a second) until no thread of this module is still going to
/// run Python code: blocking waits in other threads are abandoned with an exception.
#[pyfunction]
pub fn _at_exit(py: Python<'_>) {
    EXIT_THREAD.with(|t| t.set(true));
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while BUSY.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    });
}

/// Registered with `os.register_at_fork`: the threads counted in [`BUSY`], and the one that
/// answers SIGTERM, stayed in the parent.
#[pyfunction]
pub fn _after_fork_in_child() {
    BUSY.store(0, Ordering::SeqCst);
    crate::sigterm::after_fork_in_child();
}

/// An asyncio future (of the running loop) for `fut`, which runs on the accord runtime.
/// Cancelling the asyncio future drops `fut`.
pub fn future_into_py<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    crate::completion::future_into_py(py, fut, true)
}

/// Like [`future_into_py`], but cancelling the asyncio future does not stop `fut`: for
/// operations that should not be cut in half (release, close).
pub fn detached_into_py<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    crate::completion::future_into_py(py, fut, false)
}

/// A function or class of `accord/_aio.py`, the asyncio glue.
pub fn aio<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static AIO: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    AIO.get_or_try_init(py, || py.import("accord._aio").map(Bound::unbind))?
        .bind(py)
        .getattr(name)
}
