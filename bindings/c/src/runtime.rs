//! The one tokio runtime of the process, created on first use and again in a forked child
//! (whose copy of the parent's runtime has no threads).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Runtime;

static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);
/// Runtimes inherited through fork(): their threads live only in the parent, so they can never
/// be dropped here (dropping joins threads). Kept reachable rather than leaked.
static INHERITED: Mutex<Vec<Arc<Runtime>>> = Mutex::new(Vec::new());

pub(crate) fn runtime() -> Arc<Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = slot.as_ref() {
        if *owner == pid {
            return rt.clone();
        }
        if let Some((_, inherited)) = slot.take() {
            INHERITED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(inherited);
        }
    }
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("accord")
            .enable_all()
            .build()
            .expect("the tokio runtime starts"),
    );
    *slot = Some((pid, rt.clone()));
    rt
}

/// Runs a future to completion on the calling thread (blocking it), with accord's runtime
/// providing timers and I/O.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// Stops the runtime's threads, waiting up to a second for them.
pub(crate) fn shutdown() {
    let taken = RUNTIME.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((pid, rt)) = taken {
        if pid == std::process::id() {
            if let Ok(rt) = Arc::try_unwrap(rt) {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        } else {
            INHERITED.lock().unwrap_or_else(|e| e.into_inner()).push(rt);
        }
    }
}

/// A C timeout in milliseconds: negative waits forever, 0 polls once.
pub(crate) fn timeout(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Completes after a C timeout (never, for a negative one).
pub(crate) async fn elapse(ms: i64) {
    match timeout(ms) {
        Some(t) => tokio::time::sleep(t).await,
        None => std::future::pending().await,
    }
}
