//! G7: waiting acquires and claims sleep until a release, done or offer of their key or pool is
//! announced (or the holder's expiry comes); they never poll in a tight loop. A release names
//! the head of the key's line: only that waiter wakes, never the herd.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// How many given-up places a client remembers (see `Waiters::left`).
const MAX_LEFT: usize = 256;

/// Waiting acquires of one client, by key, and waiting claims, by pool. Wake-ups come from the
/// backend's release notifications; a reconnect of the listening side wakes everyone (one may
/// have been missed).
#[derive(Default)]
pub(crate) struct Waiters {
    /// Waiting acquires by key, each with its place in line once it has one.
    by_key: Mutex<HashMap<String, Vec<KeyWaiter>>>,
    next_waiter: AtomicU64,
    /// How many times a waiting acquire was woken by a wake-up (not by its own timer).
    woken: AtomicU64,
    /// Places in line this client gave up lately, by key: a release that named one of them
    /// while it was leaving woke nobody, so its wake-up is passed on (the newest few suffice:
    /// a leave takes one statement).
    left: Mutex<VecDeque<(String, i64)>>,
    /// Claimers, in the order they are to be woken: a freed key wakes the first that waits on
    /// its pool, which then goes to the back (so one free key never wakes every claimer, and
    /// claimers take turns).
    claimers: Mutex<VecDeque<Claimer>>,
    next_claimer: AtomicU64,
}

struct KeyWaiter {
    id: u64,
    ticket: Option<i64>,
    notify: Arc<Notify>,
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
    id: u64,
    pub notify: Arc<Notify>,
}

impl Waiter<'_> {
    /// The waiter's place in line (a wake-up naming other tickets leaves it asleep).
    pub fn set_ticket(&self, ticket: Option<i64>) {
        let mut map = self.waiters.by_key.lock().unwrap();
        if let Some(w) = map
            .get_mut(&self.key)
            .and_then(|list| list.iter_mut().find(|w| w.id == self.id))
        {
            w.ticket = ticket;
        }
    }
}

/// Registration of one waiting claim; unregisters on drop.
pub(crate) struct ClaimWaiter<'a> {
    waiters: &'a Waiters,
    id: u64,
    pub notify: Arc<Notify>,
}

impl Waiters {
    pub fn register(&self, key: &str) -> Waiter<'_> {
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        self.by_key
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default()
            .push(KeyWaiter {
                id,
                ticket: None,
                notify: notify.clone(),
            });
        Waiter {
            waiters: self,
            key: key.to_string(),
            id,
            notify,
        }
    }

    /// Waiting acquires that hold a place in line now.
    pub fn queued(&self) -> usize {
        self.by_key
            .lock()
            .unwrap()
            .values()
            .flatten()
            .filter(|w| w.ticket.is_some())
            .count()
    }

    /// Records that this client gave up its place `ticket` in `key`'s line.
    pub fn left(&self, key: &str, ticket: i64) {
        let mut left = self.left.lock().unwrap();
        if left.len() >= MAX_LEFT {
            left.pop_front();
        }
        left.push_back((key.to_string(), ticket));
    }

    /// Wake-ups delivered to waiting acquires so far.
    pub fn woken(&self) -> u64 {
        self.woken.load(Ordering::Relaxed)
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
    /// `tickets`: the places in line to wake (see `BackendEvent::Wakeup`); a waiter that has
    /// no place yet (its statement is in flight) wakes too, so that it cannot miss its turn.
    ///
    /// Returns the places this client gave up that the wake-up named: their turn is to be
    /// passed on to the next in line.
    pub fn wake(&self, key: &str, tickets: Option<(i64, Option<i64>)>) -> Vec<(String, i64)> {
        let mut passed = Vec::new();
        if let Some((first, last)) = tickets {
            let mut left = self.left.lock().unwrap();
            left.retain(|(k, t)| {
                let named = k == key && *t >= first && last.is_none_or(|l| *t <= l);
                if named {
                    passed.push((k.clone(), *t));
                }
                !named
            });
        }
        if let Some(list) = self.by_key.lock().unwrap().get(key) {
            let named = |w: &KeyWaiter| match (tickets, w.ticket) {
                (Some((first, last)), Some(t)) => t >= first && last.is_none_or(|l| t <= l),
                _ => true,
            };
            for w in list.iter().filter(|w| named(w)) {
                self.woken.fetch_add(1, Ordering::Relaxed);
                w.notify.notify_one();
            }
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
        passed
    }

    pub fn wake_all(&self) {
        for w in self.by_key.lock().unwrap().values().flatten() {
            w.notify.notify_one();
        }
        for claimer in self.claimers.lock().unwrap().iter() {
            claimer.notify.notify_one();
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut map = self.waiters.by_key.lock().unwrap();
        if let Some(list) = map.get_mut(&self.key) {
            list.retain(|w| w.id != self.id);
            if list.is_empty() {
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
