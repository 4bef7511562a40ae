//! G7: waiting acquires sleep until a release or done of their key is announced (or the
//! holder's expiry comes); they never poll in a tight loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Waiting acquires of one client, by key. Wake-ups come from the backend's release
/// notifications; a reconnect of the listening side wakes everyone (one may have been missed).
#[derive(Default)]
pub(crate) struct Waiters {
    by_key: Mutex<HashMap<String, (Arc<Notify>, usize)>>,
}

/// Registration of one waiting acquire; unregisters on drop.
pub(crate) struct Waiter<'a> {
    waiters: &'a Waiters,
    key: String,
    pub notify: Arc<Notify>,
}

impl Waiters {
    pub fn register(&self, key: &str) -> Waiter<'_> {
        let mut map = self.by_key.lock().unwrap();
        let entry = map
            .entry(key.to_string())
            .or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        Waiter {
            waiters: self,
            key: key.to_string(),
            notify: entry.0.clone(),
        }
    }

    pub fn wake(&self, key: &str) {
        if let Some((notify, _)) = self.by_key.lock().unwrap().get(key) {
            notify.notify_waiters();
        }
    }

    pub fn wake_all(&self) {
        for (notify, _) in self.by_key.lock().unwrap().values() {
            notify.notify_waiters();
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut map = self.waiters.by_key.lock().unwrap();
        if let Some(entry) = map.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(&self.key);
            }
        }
    }
}
