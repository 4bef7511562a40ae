//! What the classes that follow a stream of the core share (a member watch, an election's
//! observer): the core's stream behind a lock, since its `next` takes `&mut self` and Python may
//! read from several threads or tasks; and the token `close` fires, so that a read in progress
//! gives up the lock at once instead of holding `close` up until the next item.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use accord::CancellationToken;
use pyo3::prelude::*;
use tokio::sync::Mutex;

use crate::errors::{to_py, IntoPyResult, Timeout};

/// A stream of the core read with `next` (cancel-safe) and stopped with `close`.
pub trait Watched: Send + 'static {
    type Item: Send + 'static;
    fn next(&mut self) -> impl Future<Output = accord::Result<Self::Item>> + Send + '_;
    fn close(&self) -> impl Future<Output = ()> + Send + '_;
}

impl Watched for accord::MemberWatch {
    type Item = accord::MemberEvent;
    fn next(&mut self) -> impl Future<Output = accord::Result<Self::Item>> + Send + '_ {
        accord::MemberWatch::next(self)
    }
    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        accord::MemberWatch::close(self)
    }
}

impl Watched for accord::Observer {
    type Item = Option<accord::Leader>;
    fn next(&mut self) -> impl Future<Output = accord::Result<Self::Item>> + Send + '_ {
        accord::Observer::next(self)
    }
    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        accord::Observer::close(self)
    }
}

/// The core's stream and the token `close` fires.
pub struct Watching<W> {
    watch: Arc<Mutex<W>>,
    closing: CancellationToken,
}

impl<W> Clone for Watching<W> {
    fn clone(&self) -> Self {
        Watching {
            watch: self.watch.clone(),
            closing: self.closing.clone(),
        }
    }
}

/// How a read ended.
pub enum Read<T> {
    Item(accord::Result<T>),
    /// `close` was called.
    Closed,
    TimedOut,
}

impl<W: Watched> Watching<W> {
    pub fn new(watch: W) -> Self {
        Watching {
            watch: Arc::new(Mutex::new(watch)),
            closing: CancellationToken::new(),
        }
    }

    /// True once `close` was called.
    pub fn closed(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// The next item, unless `close` is called or `limit` passes first. Dropping it loses
    /// nothing (the core's `next` is cancel-safe).
    pub async fn read(self, limit: Option<Duration>) -> Read<W::Item> {
        let next = async {
            let mut watch = self.watch.lock().await;
            watch.next().await
        };
        let next = async {
            match limit {
                Some(t) => tokio::time::timeout(t, next)
                    .await
                    .map_or(Read::TimedOut, Read::Item),
                None => Read::Item(next.await),
            }
        };
        tokio::select! {
            biased;
            _ = self.closing.cancelled() => Read::Closed,
            read = next => read,
        }
    }

    /// Stops the stream (a read in progress ends with `Read::Closed`). Idempotent.
    pub async fn close(self) {
        self.closing.cancel();
        self.watch.lock().await.close().await;
    }
}

/// A read's answer: the item; None (iterating) or `Closed` (`next`) once closed; `Timeout`,
/// naming `what` was awaited, after `timeout` seconds.
pub fn answer<T>(
    read: Read<T>,
    what: &str,
    timeout: Option<f64>,
    iterating: bool,
) -> PyResult<Option<T>> {
    match read {
        Read::Item(item) => Ok(Some(item.py()?)),
        Read::Closed if iterating => Ok(None),
        Read::Closed => Err(to_py(accord::Error::closed())),
        Read::TimedOut => Err(Timeout::new_err(format!(
            "no {what} within {} s",
            timeout.unwrap_or_default()
        ))),
    }
}
