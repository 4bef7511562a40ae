//! Notify/listen on the client side: routing what the backend hears to subscriptions and
//! waiting acquires, and the [`Subscription`] handle.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use futures_util::Stream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::{BackendEvent, EventSink};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::waiters::Waiters;

/// A notification: what was sent on `channel`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The channel it was sent on.
    pub channel: String,
    /// The payload (possibly empty).
    pub payload: String,
}

/// What a [`Subscription`] yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A notification on one of the subscription's channels.
    Message(Message),
    /// The listening connection was re-established: notifications sent while it was down
    /// were missed. Re-read whatever state the notifications were about.
    Reconnected,
}

type Sender = mpsc::UnboundedSender<Event>;

/// Routes backend events to this client's subscriptions and waiters.
pub(crate) struct Dispatch {
    namespace: String,
    pub waiters: Waiters,
    subscriptions: Mutex<HashMap<String, Vec<(u64, Sender)>>>,
    next_id: AtomicU64,
}

impl Dispatch {
    pub fn new(namespace: String) -> Self {
        Dispatch {
            namespace,
            waiters: Waiters::default(),
            subscriptions: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }

    fn subscribe(&self, channels: &[String], sender: Sender) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut subs = self.subscriptions.lock().unwrap();
        for channel in channels {
            subs.entry(channel.clone())
                .or_default()
                .push((id, sender.clone()));
        }
        id
    }

    fn unsubscribe(&self, id: u64, channels: &[String]) {
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
                    for (_, sender) in list {
                        let _ = sender.send(Event::Message(Message {
                            channel: channel.clone(),
                            payload: payload.clone(),
                        }));
                    }
                }
            }
            BackendEvent::Wakeup { namespace, key } => {
                if namespace == self.namespace {
                    self.waiters.wake(&key);
                }
            }
            BackendEvent::Reconnected => {
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

/// Notifications on one or more channels, in the order the coordinator delivered them.
///
/// Read it with [`Subscription::recv`] (or [`Subscription::stream`]); notifications queue up
/// in memory until read. Closing it (or dropping it) stops delivery and UNLISTENs channels no
/// other subscription of the client needs.
pub struct Subscription {
    client: Client,
    id: u64,
    channels: Vec<String>,
    /// Channels whose LISTEN was confirmed, to be undone on close.
    listened: usize,
    receiver: tokio::sync::Mutex<mpsc::UnboundedReceiver<Event>>,
    closed: CancellationToken,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

impl Subscription {
    pub(crate) async fn open(client: &Client, channels: Vec<String>) -> Result<Subscription> {
        let shared = client.shared();
        let (sender, receiver) = mpsc::unbounded_channel();
        let id = shared.dispatch.subscribe(&channels, sender);
        let mut subscription = Subscription {
            client: client.clone(),
            id,
            channels,
            listened: 0,
            receiver: tokio::sync::Mutex::new(receiver),
            closed: CancellationToken::new(),
        };
        for channel in &subscription.channels {
            // On failure, dropping the subscription undoes the LISTENs confirmed so far.
            tokio::select! {
                r = shared.backend.listen(channel) => r?,
                _ = shared.closed.cancelled() => return Err(Error::closed()),
            }
            subscription.listened += 1;
        }
        Ok(subscription)
    }

    /// The channels this subscription receives.
    pub fn channels(&self) -> &[String] {
        &self.channels
    }

    /// The next event. `Ok(None)` once this subscription is closed; `Err(Closed)` once the
    /// client is closed. Cancel-safe: dropping the future loses no event.
    pub async fn recv(&self) -> Result<Option<Event>> {
        // After fork() nothing would ever arrive here: the listening connection is the parent's.
        self.client.shared().check_fork()?;
        if self.closed.is_cancelled() {
            return Ok(None);
        }
        let mut receiver = tokio::select! {
            r = self.receiver.lock() => r,
            _ = self.closed.cancelled() => return Ok(None),
        };
        tokio::select! {
            biased;
            _ = self.closed.cancelled() => Ok(None),
            event = receiver.recv() => match event {
                Some(event) => Ok(Some(event)),
                None => Err(Error::closed()),
            },
        }
    }

    /// The events as a stream, ending after this subscription is closed or with one
    /// `Err(Closed)` when the client closes.
    pub fn stream(&self) -> impl Stream<Item = Result<Event>> + '_ {
        futures_util::stream::unfold((self, false), |(sub, ended)| async move {
            if ended {
                return None;
            }
            match sub.recv().await {
                Ok(Some(event)) => Some((Ok(event), (sub, false))),
                Ok(None) => None,
                Err(e) => Some((Err(e), (sub, true))),
            }
        })
    }

    /// Stops delivery now (a blocked `recv` returns `Ok(None)`) and UNLISTENs.
    pub async fn close(&self) {
        if self.closed.is_cancelled() {
            return;
        }
        self.closed.cancel();
        let shared = self.client.shared();
        if shared.is_forked() {
            return; // the LISTENs are the parent's
        }
        shared.dispatch.unsubscribe(self.id, &self.channels);
        for channel in &self.channels[..self.listened] {
            shared.backend.unlisten(channel).await;
        }
    }

    /// True once closed (by [`Subscription::close`] or by closing the client).
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.client.is_closed()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.closed.is_cancelled() {
            return;
        }
        self.closed.cancel();
        let shared = self.client.shared().clone();
        if shared.is_forked() {
            return;
        }
        shared.dispatch.unsubscribe(self.id, &self.channels);
        let channels: Vec<String> = self.channels[..self.listened].to_vec();
        if channels.is_empty() || shared.closed.is_cancelled() {
            return;
        }
        shared.runtime.clone().spawn(async move {
            for channel in &channels {
                shared.backend.unlisten(channel).await;
            }
        });
    }
}
