//! Routes what the backend hears to this session's subscriptions (notifications) and waiting
//! acquires (wake-ups of released keys).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::waiters::Waiters;
use crate::backend::{BackendEvent, EventSink};
use crate::stats::{Counter, Recorder};

/// A notification: what was sent on `channel`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The channel it was sent on.
    pub channel: String,
    /// The payload (possibly empty).
    pub payload: String,
}

/// What a [`Subscription`](crate::Subscription) yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A notification on one of the subscription's channels.
    Message(Message),
    /// The listening connection was re-established: notifications sent while it was down
    /// were missed. Re-read whatever state the notifications were about.
    Reconnected,
}

pub(crate) type Sender = mpsc::UnboundedSender<Event>;

/// Routes backend events to this client's subscriptions and waiters.
pub(crate) struct Dispatch {
    pub waiters: Waiters,
    /// Places this client gave up that a release named: the session's task passes each turn on.
    turns: mpsc::UnboundedSender<(String, i64)>,
    pub turns_to_pass: Mutex<Option<mpsc::UnboundedReceiver<(String, i64)>>>,
    subscriptions: Mutex<HashMap<String, Vec<(u64, Sender)>>>,
    next_id: AtomicU64,
    /// Notifications delivered and listener reconnections count here.
    stats: Arc<Recorder>,
}

impl Dispatch {
    pub fn new(stats: Arc<Recorder>) -> Self {
        let (turns, turns_to_pass) = mpsc::unbounded_channel();
        Dispatch {
            waiters: Waiters::default(),
            turns,
            turns_to_pass: Mutex::new(Some(turns_to_pass)),
            subscriptions: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            stats,
        }
    }

    pub fn subscribe(&self, channels: &[String], sender: Sender) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut subs = self.subscriptions.lock().unwrap();
        for channel in channels {
            subs.entry(channel.clone())
                .or_default()
                .push((id, sender.clone()));
        }
        id
    }

    pub fn unsubscribe(&self, id: u64, channels: &[String]) {
        let mut subs = self.subscriptions.lock().unwrap();
        for channel in channels {
            if let Some(list) = subs.get_mut(channel) {
                list.retain(|(i, _)| *i != id);
                if list.is_empty() {
                    subs.remove(channel);
                }
            }
        }
    }

    /// Ends every subscription (their senders drop) and wakes every waiter.
    pub fn close(&self) {
        self.subscriptions.lock().unwrap().clear();
        self.waiters.wake_all();
    }
}

impl EventSink for Dispatch {
    fn deliver(&self, event: BackendEvent) {
        match event {
            BackendEvent::Notification { channel, payload } => {
                let subs = self.subscriptions.lock().unwrap();
                if let Some(list) = subs.get(&channel) {
                    self.stats.add(Counter::Notifications, list.len() as u64);
                    for (_, sender) in list {
                        let _ = sender.send(Event::Message(Message {
                            channel: channel.clone(),
                            payload: payload.clone(),
                        }));
                    }
                }
            }
            BackendEvent::Wakeup { tag, tickets, pool } => {
                // The tag covers the namespace: another namespace's key has another tag.
                for turn in self.waiters.wake(tag.as_deref(), tickets, pool.as_deref()) {
                    let _ = self.turns.send(turn);
                }
            }
            BackendEvent::Reconnected => {
                self.stats.add(Counter::Reconnects, 1);
                self.waiters.wake_all();
                let subs = self.subscriptions.lock().unwrap();
                let mut told = HashSet::new();
                for (id, sender) in subs.values().flatten() {
                    if told.insert(*id) {
                        let _ = sender.send(Event::Reconnected);
                    }
                }
            }
        }
    }
}
