//! Promises settled by the tokio runtime through one threadsafe function per JavaScript thread.
//!
//! napi-rs' own future-to-Promise bridge creates (and later finalizes) a threadsafe function,
//! with its libuv handle and cleanup hook, for every call: `make bench` measured the Node
//! client's try_acquire+release at 1.36x the Rust core's, most of it that. Here a JavaScript
//! thread makes one threadsafe function, the first time it needs it. A finished call queues
//! its output and, if the queue was empty, calls the function once; on the JavaScript thread
//! the queue is drained and each Promise settled. The function keeps the event loop alive only
//! while calls are pending, as napi-rs' bridge did.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::future::Future;
use std::ptr;
use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::*;
use napi::sys;

/// A finished call's output (`None`: it ended without one), handed to its `Settle` on the
/// JavaScript thread.
type Output = Option<Box<dyn Any + Send>>;
type Settle = Box<dyn FnOnce(&Env, Output)>;

/// The runtime threads' side of one JavaScript thread's bridge.
struct Queue {
    state: Mutex<QueueState>,
}

struct QueueState {
    /// Null once the environment is torn down: outputs are then dropped.
    tsfn: sys::napi_threadsafe_function,
    finished: Vec<(u64, Output)>,
}

// SAFETY: the threadsafe function is made to be called from any thread; it is only called,
// and nulled at teardown, under the state's lock.
unsafe impl Send for QueueState {}

impl Queue {
    fn push(&self, id: u64, output: Output) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.tsfn.is_null() {
            return;
        }
        state.finished.push((id, output));
        if state.finished.len() == 1 {
            // SAFETY: a live threadsafe function (not yet torn down: checked under this lock).
            unsafe {
                sys::napi_call_threadsafe_function(
                    state.tsfn,
                    ptr::null_mut(),
                    sys::ThreadsafeFunctionCallMode::nonblocking,
                )
            };
        }
    }
}

/// The JavaScript thread's side.
struct Bridge {
    queue: Arc<Queue>,
    pending: HashMap<u64, Settle>,
    next_id: u64,
}

thread_local! {
    static BRIDGE: RefCell<Option<Bridge>> = const { RefCell::new(None) };
}

fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(
            Status::from(status),
            format!("accord: {what} failed"),
        ))
    }
}

/// The thread's queue, made with its threadsafe function on first use.
fn queue(env: &Env) -> Result<Arc<Queue>> {
    if let Some(queue) = BRIDGE.with_borrow(|b| b.as_ref().map(|b| b.queue.clone())) {
        return Ok(queue);
    }
    let raw = env.raw();
    let mut name = ptr::null_mut();
    let mut tsfn = ptr::null_mut();
    // SAFETY: napi calls on the JavaScript thread with its live env; the out pointers are
    // locals.
    unsafe {
        check(
            sys::napi_create_string_utf8(raw, c"accord".as_ptr(), 6, &mut name),
            "naming the completion function",
        )?;
        check(
            sys::napi_create_threadsafe_function(
                raw,
                ptr::null_mut(),
                ptr::null_mut(),
                name,
                0,
                1,
                ptr::null_mut(),
                None,
                ptr::null_mut(),
                Some(drain),
                &mut tsfn,
            ),
            "creating the completion function",
        )?;
        // Nothing pending yet: it must not keep the process alive.
        check(
            sys::napi_unref_threadsafe_function(raw, tsfn),
            "unref of the completion function",
        )?;
    }
    let queue = Arc::new(Queue {
        state: Mutex::new(QueueState {
            tsfn,
            finished: Vec::new(),
        }),
    });
    // Registered after the threadsafe function, so it runs before Node finalizes it (hooks run
    // in reverse order): from then on, finished calls are dropped instead of queued.
    let hook_data = Arc::into_raw(queue.clone()) as *mut c_void;
    // SAFETY: as above; `hook_data` is released by the hook.
    unsafe {
        check(
            sys::napi_add_env_cleanup_hook(raw, Some(teardown), hook_data),
            "registering the completion clean-up",
        )?;
    }
    BRIDGE.with_borrow_mut(|b| {
        *b = Some(Bridge {
            queue: queue.clone(),
            pending: HashMap::new(),
            next_id: 0,
        })
    });
    Ok(queue)
}

unsafe extern "C" fn teardown(data: *mut c_void) {
    // SAFETY: the pointer `queue` leaked for this hook, taken back once.
    let queue = unsafe { Arc::from_raw(data as *const Queue) };
    let mut state = queue.state.lock().unwrap_or_else(PoisonError::into_inner);
    let tsfn = std::mem::replace(&mut state.tsfn, ptr::null_mut());
    state.finished.clear();
    drop(state);
    if !tsfn.is_null() {
        // SAFETY: still live: Node finalizes it after this hook.
        unsafe {
            sys::napi_release_threadsafe_function(tsfn, sys::ThreadsafeFunctionReleaseMode::abort)
        };
    }
    BRIDGE.with_borrow_mut(|b| *b = None);
}

/// The threadsafe function's body, on the JavaScript thread: settles every finished call.
unsafe extern "C" fn drain(
    env: sys::napi_env,
    _js_callback: sys::napi_value,
    _context: *mut c_void,
    _data: *mut c_void,
) {
    if env.is_null() {
        return; // the environment is going away
    }
    let Some(queue) = BRIDGE.with_borrow(|b| b.as_ref().map(|b| b.queue.clone())) else {
        return;
    };
    let finished = std::mem::take(
        &mut queue
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .finished,
    );
    // Taken out first: settling may run code that starts new calls.
    let settling: Vec<_> = BRIDGE.with_borrow_mut(|b| {
        let Some(bridge) = b.as_mut() else {
            return Vec::new();
        };
        finished
            .into_iter()
            .filter_map(|(id, output)| bridge.pending.remove(&id).map(|p| (p, output)))
            .collect()
    });
    let env_ref = Env::from_raw(env);
    for (settle, output) in settling {
        settle(&env_ref, output);
    }
    let idle = BRIDGE.with_borrow(|b| b.as_ref().is_none_or(|b| b.pending.is_empty()));
    if idle {
        let tsfn = queue
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tsfn;
        if !tsfn.is_null() {
            // SAFETY: on the JavaScript thread, a live threadsafe function.
            unsafe { sys::napi_unref_threadsafe_function(env, tsfn) };
        }
    }
}

/// Runs `fut` on the tokio runtime and hands its output to `settle` on the JavaScript thread
/// (`None` if `fut` ended without one). Until then the event loop is kept alive.
pub(crate) fn later<T, F, S>(env: &Env, fut: F, settle: S) -> Result<()>
where
    T: Send + 'static,
    F: Future<Output = Option<T>> + Send + 'static,
    S: FnOnce(&Env, Option<T>) + 'static,
{
    let queue = queue(env)?;
    let settle: Settle = Box::new(move |env, output| {
        let output = output.map(|o| {
            *o.downcast::<T>()
                .expect("a finished call's output has its call's type")
        });
        settle(env, output)
    });
    let (id, first) = BRIDGE.with_borrow_mut(|b| {
        let bridge = b.as_mut().expect("made by queue()");
        let id = bridge.next_id;
        bridge.next_id += 1;
        bridge.pending.insert(id, settle);
        (id, bridge.pending.len() == 1)
    });
    if first {
        let tsfn = queue
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tsfn;
        // SAFETY: on the JavaScript thread, a live threadsafe function: a pending call keeps
        // the event loop alive.
        unsafe { sys::napi_ref_threadsafe_function(env.raw(), tsfn) };
    }
    spawn(async move {
        let output = fut.await;
        queue.push(id, output.map(|o| Box::new(o) as Box<dyn Any + Send>));
    });
    Ok(())
}

/// A Promise for `fut`, which runs on the tokio runtime; `finish` turns its output into the
/// value the Promise resolves with (or the error it rejects with), on the JavaScript thread.
pub(crate) fn promise<'e, T, V, F, M>(env: &'e Env, fut: F, finish: M) -> Result<PromiseRaw<'e, V>>
where
    T: Send + 'static,
    V: ToNapiValue,
    F: Future<Output = T> + Send + 'static,
    M: FnOnce(&Env, T) -> Result<V> + 'static,
{
    let raw = env.raw();
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    // SAFETY: napi call on the JavaScript thread; out pointers are locals.
    unsafe {
        check(
            sys::napi_create_promise(raw, &mut deferred, &mut promise),
            "creating a Promise",
        )?;
    }
    later(env, async move { Some(fut.await) }, move |env, output| {
        let settled = output
            .ok_or_else(|| Error::from_reason("accord: a call ended without an answer"))
            .and_then(|output| finish(env, output))
            // SAFETY: on the JavaScript thread with its env.
            .and_then(|value| unsafe { ToNapiValue::to_napi_value(env.raw(), value) });
        // SAFETY: napi calls on the JavaScript thread; the deferred is settled exactly once.
        unsafe {
            match settled {
                Ok(value) => sys::napi_resolve_deferred(env.raw(), deferred, value),
                Err(error) => match ToNapiValue::to_napi_value(env.raw(), error) {
                    Ok(reason) => sys::napi_reject_deferred(env.raw(), deferred, reason),
                    Err(_) => {
                        let mut reason = ptr::null_mut();
                        sys::napi_get_undefined(env.raw(), &mut reason);
                        sys::napi_reject_deferred(env.raw(), deferred, reason)
                    }
                },
            };
        }
    })?;
    Ok(PromiseRaw::new(raw, promise))
}
