//! The [`Subscription`] handle: notifications on some channels, read in order.

use std::future::Future;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::Stream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::session::{Event, Session};

/// Notifications on one or more channels, in the order the coordinator delivered them.
///
/// Read it with [`Subscription::recv`] (or [`Subscription::stream`]); notifications queue up
/// in memory until read. Closing it (or dropping it) stops delivery and UNLISTENs channels no
/// other subscription of the client needs.
pub struct Subscription {
    session: Arc<Session>,
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
    pub(crate) async fn open(
        session: &Arc<Session>,
        channels: Vec<String>,
    ) -> Result<Subscription> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let id = session.dispatch.subscribe(&channels, sender);
        let mut subscription = Subscription {
            session: session.clone(),
            id,
            channels,
            listened: 0,
            receiver: tokio::sync::Mutex::new(receiver),
            closed: CancellationToken::new(),
        };
        for channel in &subscription.channels {
            // On failure, dropping the subscription undoes the LISTENs confirmed so far.
            tokio::select! {
                r = session.scope.backend.listen(channel) => r?,
                _ = session.closed.cancelled() => return Err(Error::closed()),
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
        self.session.check_fork()?;
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

    /// Waits until an event says the table may have changed (a notification, or a reconnect:
    /// notifications may have been missed) or `wait` passes: for a reader that then reads the
    /// table. `Err(Closed)` once this subscription or the client is closed. Cancel-safe.
    pub(crate) async fn changed_or_after(&self, wait: Duration) -> Result<()> {
        tokio::select! {
            event = self.recv() => match event? {
                Some(Event::Message(_)) | Some(Event::Reconnected) => Ok(()),
                None => Err(Error::closed()),
            },
            _ = tokio::time::sleep(wait) => Ok(()),
        }
    }

    /// Drops the events already delivered and not read: for a reader about to look at the
    /// table, which every one of them only said to read again.
    pub(crate) fn discard_pending(&self) {
        if let Ok(mut receiver) = self.receiver.try_lock() {
            while receiver.try_recv().is_ok() {}
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
        let session = &self.session;
        if session.is_forked() {
            return; // the LISTENs are the parent's
        }
        session.dispatch.unsubscribe(self.id, &self.channels);
        for channel in &self.channels[..self.listened] {
            session.scope.backend.unlisten(channel).await;
        }
    }

    /// True once closed (by [`Subscription::close`] or by closing the client).
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.session.is_closed()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.closed.is_cancelled() {
            return;
        }
        self.closed.cancel();
        let session = &self.session;
        if session.is_forked() {
            return;
        }
        session.dispatch.unsubscribe(self.id, &self.channels);
        let channels: Vec<String> = self.channels[..self.listened].to_vec();
        if channels.is_empty() || session.is_closed() {
            return;
        }
        let scope = session.scope.clone();
        scope.runtime.clone().spawn(async move {
            for channel in &channels {
                scope.backend.unlisten(channel).await;
            }
        });
    }
}

/// A read of the table under way, kept by a reader across calls of its `next` (a member watch,
/// an observer), so that a call dropped half-way leaves it to the next. Behind a `Mutex` only
/// so that its owner stays `Sync`: it is reached through `&mut`, never locked.
pub(crate) struct PendingRead<T>(std::sync::Mutex<BoxFuture<'static, Result<T>>>);

impl<T> PendingRead<T> {
    pub(crate) fn new(read: impl Future<Output = Result<T>> + Send + 'static) -> Self {
        PendingRead(std::sync::Mutex::new(Box::pin(read)))
    }

    /// The read, to poll.
    pub(crate) fn get(&mut self) -> &mut BoxFuture<'static, Result<T>> {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}
