//! G7: waiting acquires and claims sleep until a release, done or offer of their key or pool is
//! announced (or the holder's expiry comes); they never poll in a tight loop.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Waiting acquires of one client, by key, and waiting claims, by pool. Wake-ups come from the
/// backend's release notifications; a reconnect of the listening side wakes everyone (one may
/// have been missed).
#[derive(Default)]
pub(crate) struct Waiters {
    by_key: Mutex<HashMap<String, (Arc<Notify>, usize)>>,
    /// Claimers, in the order they are to be woken: a freed key wakes the first that waits on
    /// its pool, which then goes to the back (so one free key never wakes every claimer, and
    /// claimers take turns).
    claimers: Mutex<VecDeque<Claimer>>,
    next_claimer: AtomicU64,
}

struct Claimer {
    id: u64,
    pool: String,
    notify: Arc<Notify>,
}

/// Registration of one waiting acquire; unregisters on drop.
pub(crate) struct Waiter<'a> {
    waiters: &'a Waiters,
    key: String,
    pub notify: Arc<Notify>,
}

/// Registration of one waiting claim; unregisters on drop.
pub(crate) struct ClaimWaiter<'a> {
    waiters: &'a Waiters,
    id: u64,
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

    pub fn register_claimer(&self, pool: &str) -> ClaimWaiter<'_> {
        let id = self.next_claimer.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        self.claimers.lock().unwrap().push_back(Claimer {
            id,
            pool: pool.to_string(),
            notify: notify.clone(),
        });
        ClaimWaiter {
            waiters: self,
            id,
            notify,
        }
    }

    /// `key` was released or finished (or, when it names a pool, keys were offered to it).
    pub fn wake(&self, key: &str) {
        if let Some((notify, _)) = self.by_key.lock().unwrap().get(key) {
            notify.notify_waiters();
        }
        let mut claimers = self.claimers.lock().unwrap();
        // An offer: every claimer of that pool may find a key.
        for claimer in claimers.iter().filter(|c| c.pool == key) {
            claimer.notify.notify_one();
        }
        // One freed key of a pool: one claimer (a permit is kept if it is between two tries).
        let freed = claimers
            .iter()
            .position(|c| key.len() > c.pool.len() && key.starts_with(&c.pool));
        if let Some(claimer) = freed.and_then(|i| claimers.remove(i)) {
            claimer.notify.notify_one();
            claimers.push_back(claimer);
        }
    }

    pub fn wake_all(&self) {
        for (notify, _) in self.by_key.lock().unwrap().values() {
            notify.notify_waiters();
        }
        for claimer in self.claimers.lock().unwrap().iter() {
            claimer.notify.notify_one();
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

impl Drop for ClaimWaiter<'_> {
    fn drop(&mut self) {
        self.waiters
            .claimers
            .lock()
            .unwrap()
            .retain(|c| c.id != self.id);
    }
}
