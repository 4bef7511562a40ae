//! The SIGTERM handler that closes every client of the process (`accord::close_all`) and then
//! ends it as the signal's default does (`accord/_sigterm.py` decides when it is put in).
//!
//! It is a C-level handler, not a Python one, because a Python handler runs only when the main
//! thread next runs Python code: a signal that lands while the main thread is about to block in
//! a C call (a multiprocessing Pool's worker between CPython's last check for signals and its
//! `sem_wait` on the task queue's lock, when `terminate()` SIGTERMs it) or that the kernel gives
//! to another thread is noted and never acted on, and the process, no longer killable by
//! SIGTERM, never ends. So the handler only wakes a thread of this module (through a pipe: a
//! write is async-signal-safe), which closes the clients and ends the process whatever the main
//! thread is doing.

#[cfg(unix)]
mod imp {
    use std::io;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::{Mutex, PoisonError};

    use crate::runtime;

    /// The pipe that wakes the closing thread, and the process that thread lives in: a forked
    /// child inherits the handler and the pipe, but not the thread (see [`after_fork_in_child`]).
    static WAKE_WRITE: AtomicI32 = AtomicI32::new(-1);
    static WAKE_READ: AtomicI32 = AtomicI32::new(-1);
    /// 0 while not installed.
    static OWNER: AtomicI32 = AtomicI32::new(0);
    static INSTALLING: Mutex<()> = Mutex::new(());

    /// Puts in the handler if SIGTERM still has its default disposition (a handler of the
    /// application's, Python's or any other, and an ignored SIGTERM are left alone). Returns
    /// whether it did.
    pub fn install() -> io::Result<bool> {
        let _installing = INSTALLING.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: sigaction with a null new action only reads the current one into `current`.
        let default = unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            check(libc::sigaction(
                libc::SIGTERM,
                std::ptr::null(),
                &mut current,
            ))?;
            current.sa_sigaction == libc::SIG_DFL
        };
        if !default || OWNER.load(Ordering::Acquire) != 0 {
            return Ok(false);
        }
        start_closer()?;
        // SAFETY: a zeroed sigaction with an empty mask and a handler that only makes
        // async-signal-safe calls. SA_RESTART: the handler does nothing the interrupted code
        // needs to hear of, so its system calls go on rather than fail with EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigterm as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            check(libc::sigaction(
                libc::SIGTERM,
                &action,
                std::ptr::null_mut(),
            ))?;
        }
        Ok(true)
    }

    /// In a forked child (registered with `os.register_at_fork`): the closing thread stayed in
    /// the parent, and the inherited pipe would wake the parent's. A new pipe and thread of its
    /// own; until then the handler acts as the default (see [`on_sigterm`]).
    pub fn after_fork_in_child() {
        if OWNER.load(Ordering::Acquire) == 0 {
            return;
        }
        for fd in [&WAKE_READ, &WAKE_WRITE] {
            // SAFETY: the child's copies of the parent's pipe; closing them leaves the parent's.
            unsafe { libc::close(fd.swap(-1, Ordering::AcqRel)) };
        }
        if let Err(error) = start_closer() {
            eprintln!("accord: SIGTERM will not close this process's clients: {error}");
        }
    }

    /// Opens the pipe and starts the thread that waits on it, then makes this process its owner.
    fn start_closer() -> io::Result<()> {
        let mut fds = [-1; 2];
        // SAFETY: pipe fills `fds`; fcntl sets flags on the descriptors it made.
        unsafe {
            check(libc::pipe(fds.as_mut_ptr()))?;
            for fd in fds {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
            // A full pipe means the thread was woken already: the handler must not block.
            libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK);
        }
        let [read, write] = fds;
        let spawned = std::thread::Builder::new()
            .name("accord-sigterm".into())
            .spawn(move || {
                runtime::leave_signals_to_python();
                wait_then_close_and_end(read);
            });
        if let Err(error) = spawned {
            // SAFETY: the descriptors made above, used by nothing else.
            unsafe {
                libc::close(read);
                libc::close(write);
            }
            return Err(error);
        }
        WAKE_READ.store(read, Ordering::Release);
        WAKE_WRITE.store(write, Ordering::Release);
        // SAFETY: getpid cannot fail.
        OWNER.store(unsafe { libc::getpid() }, Ordering::Release);
        Ok(())
    }

    /// The handler: async-signal-safe calls only (getpid, write, sigaction, raise), errno kept.
    extern "C" fn on_sigterm(_: libc::c_int) {
        let saved = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: getpid cannot fail.
        if OWNER.load(Ordering::Acquire) == unsafe { libc::getpid() } {
            let byte = 1u8;
            // SAFETY: writes a local byte to the pipe's (non-blocking) write end.
            let _ = unsafe {
                libc::write(
                    WAKE_WRITE.load(Ordering::Acquire),
                    (&byte as *const u8).cast(),
                    1,
                )
            };
        } else {
            // A forked child whose closing thread is not started (or a fork Python did not
            // see): the signal's default, delivered once this handler returns.
            end_as_default_in_handler();
        }
        set_errno(saved);
    }

    /// From the handler, where SIGTERM stays blocked until it returns.
    fn end_as_default_in_handler() {
        // SAFETY: async-signal-safe libc calls on a local, zeroed action.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
            libc::raise(libc::SIGTERM);
        }
    }

    /// The closing thread: waits for the handler's byte, closes every client, then ends the
    /// process as SIGTERM's default does.
    fn wait_then_close_and_end(read: libc::c_int) {
        let mut byte = 0u8;
        loop {
            // SAFETY: reads one byte into a local.
            let n = unsafe { libc::read(read, (&mut byte as *mut u8).cast(), 1) };
            if n == 1 {
                break;
            }
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return; // the pipe is gone: nothing will wake this thread
        }
        runtime::runtime().block_on(accord::close_all());
        // SAFETY: plain libc calls; `raise` from this thread, SIGTERM unblocked in it and back to
        // its default, is delivered before `raise` returns and ends the whole process.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
            let mut term: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut term);
            libc::sigaddset(&mut term, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &term, std::ptr::null_mut());
            libc::raise(libc::SIGTERM);
            // Still here: the process is a container's first (PID 1), for which the kernel
            // ignores a signal left to its default. The stop was asked for all the same: end
            // as a shell reports a SIGTERM'd process.
            libc::_exit(128 + libc::SIGTERM);
        }
    }

    fn check(result: libc::c_int) -> io::Result<()> {
        if result == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn set_errno(value: libc::c_int) {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() = value };
    }

    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    fn set_errno(value: libc::c_int) {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__error() = value };
    }
}

#[cfg(unix)]
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// Puts in the SIGTERM handler if SIGTERM has its default disposition; returns whether it did.
/// (Windows has no SIGTERM to handle: never.)
#[pyfunction]
pub fn _close_on_sigterm() -> PyResult<bool> {
    #[cfg(unix)]
    return imp::install()
        .map_err(|e| PyOSError::new_err(format!("accord: cannot handle SIGTERM: {e}")));
    #[cfg(not(unix))]
    Ok(false)
}

/// See `imp::after_fork_in_child`.
pub fn after_fork_in_child() {
    #[cfg(unix)]
    imp::after_fork_in_child();
}
