//! The clients of this process that a stop signal should close: [`close_all`] is what the Python
//! and Node bindings run on SIGTERM (and what a program that handles the signal itself may call),
//! so that a stopped process gives its leases and shards back at once instead of leaving them
//! to expire at their ttl. What closing does is [`Session::close`]'s; this only finds the
//! sessions.

use std::sync::{Arc, Mutex, Weak};

use super::Session;

/// Weak: the list must not keep a dropped client open.
static OPEN: Mutex<Vec<Weak<Session>>> = Mutex::new(Vec::new());

/// Lists `session` for [`close_all`]; entries of sessions dropped or closed go on the way.
pub(crate) fn register(session: &Arc<Session>) {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|s| s.upgrade().is_some_and(|s| !s.is_closed()));
    open.push(Arc::downgrade(session));
}

/// Closes, concurrently, every client of this process still open, except those connected with
/// [`crate::ClientOptions::close_on_sigterm`] off, as [`crate::Client::close`] does: leases
/// and shards are released, memberships left, waits and subscriptions end with `Closed`.
/// Returns how many it closed (not those already closed or closing). Bounded like `close` (a
/// release that does not answer within 5 s is left to its ttl), and, like `close`, it returns
/// only once every close it found under way (the application's own, or another `close_all`)
/// is done. In a forked child it releases nothing of the parent's (G12).
pub async fn close_all() -> usize {
    let sessions: Vec<Arc<Session>> = {
        let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.iter().filter_map(Weak::upgrade).collect()
    };
    let closed = sessions.iter().filter(|s| !s.is_closed()).count();
    futures_util::future::join_all(sessions.iter().map(|s| s.close())).await;
    closed
}
