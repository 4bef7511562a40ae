//! G7: waiting acquires and claims sleep until a release, done or offer of their key or pool is
//! announced (or the holder's expiry comes); they never poll in a tight loop. A release names
//! the head of the key's line: only that waiter wakes, never the herd.
//!
//! Wake-ups name no key (any role may listen to them, or send one): they carry the key's tag
//! (`rules::wake_tag`, keyed with a secret only roles with accord's grants can read), and
//! waiters are filed here by the tags of their keys and pools. A wake-up only ever makes a
//! waiter try its statement again, so a forged one costs a statement, never a grant.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;

/// How many given-up places a client remembers (see `Waiters::left`).
const MAX_LEFT: usize = 256;

/// Waiting acquires of one client, by key, and waiting claims, by pool. Wake-ups come from the
/// backend's release notifications; a reconnect of the listening side wakes everyone (one may
/// have been missed).
#[derive(Default)]
pub(crate) struct Waiters {
    /// How this client's keys are tagged: its namespace, and the store's secret (`None`: the
    /// store has none; every wake-up then wakes every waiter).
    tags: OnceLock<(String, Option<String>)>,
    /// Waiting acquires by their key's tag, each with its place in line once it has one.
    by_key: Mutex<HashMap<String, Vec<KeyWaiter>>>,
    next_waiter: AtomicU64,
    /// How many times a waiting acquire was woken by a wake-up (not by its own timer).
    woken: AtomicU64,
    /// Places in line this client gave up lately, by key: a release that named one of them
    /// while it was leaving woke nobody, so its wake-up is passed on (the newest few suffice:
    /// a leave takes one statement).
    left: Mutex<VecDeque<Left>>,
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
    /// The tag of the pool it claims from.
    pool: String,
    notify: Arc<Notify>,
}

/// A place in line this client gave up: the key (to pass the turn on), its tag, the ticket.
struct Left {
    key: String,
    tag: String,
    ticket: i64,
}

/// Registration of one waiting acquire; unregisters on drop.
pub(crate) struct Waiter<'a> {
    waiters: &'a Waiters,
    /// Its key's tag.
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
    /// Sets how keys are tagged, once the store is open (before anyone waits).
    pub fn set_tags(&self, namespace: &str, secret: Option<String>) {
        let _ = self.tags.set((namespace.to_string(), secret));
    }

    /// The tag wake-ups of `key` carry; empty when there is no secret to tag with.
    fn tag(&self, key: &str) -> String {
        match self.tags.get() {
            Some((namespace, Some(secret))) => crate::rules::wake_tag(secret, namespace, key),
            _ => String::new(),
        }
    }

    pub fn register(&self, key: &str) -> Waiter<'_> {
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        let key = self.tag(key);
        self.by_key
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .push(KeyWaiter {
                id,
                ticket: None,
                notify: notify.clone(),
            });
        Waiter {
            waiters: self,
            key,
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
        left.push_back(Left {
            key: key.to_string(),
            tag: self.tag(key),
            ticket,
        });
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
            pool: self.tag(pool),
            notify: notify.clone(),
        });
        ClaimWaiter {
            waiters: self,
            id,
            notify,
        }
    }

    /// The key tagged `tag` was released or finished (or, when it is a pool's tag, keys were
    /// offered to it; `pool`: the tag of the pool the freed key belongs to). No secret here:
    /// every waiter looks (its statement says what is true). `tickets`: the
    /// places in line to wake (see `BackendEvent::Wakeup`); a waiter that has no place yet
    /// (its statement is in flight) wakes too, so that it cannot miss its turn.
    ///
    /// Returns the places this client gave up that the wake-up named: their turn is to be
    /// passed on to the next in line.
    pub fn wake(
        &self,
        tag: Option<&str>,
        tickets: Option<(i64, Option<i64>)>,
        pool: Option<&str>,
    ) -> Vec<(String, i64)> {
        let tagged = matches!(self.tags.get(), Some((_, Some(_))));
        if tagged && tag.is_none() {
            // The store tags every wake-up once its secret exists, and this client read it:
            // an untagged one was forged (or sent before the secret was made, a wake-up the
            // waiters' own timers cover). Waking everyone for it would let any role make every
            // waiter of every client run its statement again with one NOTIFY.
            return Vec::new();
        }
        // Without a secret this client cannot tell keys apart: everyone looks.
        let untagged = !tagged;
        let is = |mine: &str, theirs: Option<&str>| untagged || theirs == Some(mine);
        let in_range = |t: i64| match tickets {
            Some((first, last)) => t >= first && last.is_none_or(|l| t <= l),
            None => true,
        };
        let mut passed = Vec::new();
        if tickets.is_some() {
            let mut left = self.left.lock().unwrap();
            left.retain(|l| {
                let named = is(&l.tag, tag) && in_range(l.ticket);
                if named {
                    passed.push((l.key.clone(), l.ticket));
                }
                !named
            });
        }
        let by_key = self.by_key.lock().unwrap();
        let lists: Vec<&Vec<KeyWaiter>> = match tag {
            Some(tag) if !untagged => by_key.get(tag).into_iter().collect(),
            _ => by_key.values().collect(),
        };
        for w in lists
            .into_iter()
            .flatten()
            .filter(|w| w.ticket.is_none_or(in_range))
        {
            self.woken.fetch_add(1, Ordering::Relaxed);
            w.notify.notify_one();
        }
        drop(by_key);
        let mut claimers = self.claimers.lock().unwrap();
        // An offer: every claimer of that pool may find a key.
        for claimer in claimers.iter().filter(|c| is(&c.pool, tag)) {
            claimer.notify.notify_one();
        }
        // One freed key of a pool: one claimer (a permit is kept if it is between two tries).
        let freed = claimers.iter().position(|c| is(&c.pool, pool));
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
