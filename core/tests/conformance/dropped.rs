//! Reads dropped half-way (M2, E5): a `next` future polled once, after the announcement it
//! waits for has arrived, takes it and starts its read; dropping it then is what a timeout, an
//! asyncio cancellation or a context deadline does to a binding's read, and a binding polling
//! with timeouts shorter than a read does it again and again.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

/// Well before the 30 s safety re-read: a lost announcement shows as a hang here.
const REREAD_BOUND: Duration = Duration::from_secs(10);

/// A member watch or an election observer: a `next` that must be cancel-safe.
pub trait Follow {
    type Item;
    fn next(&mut self) -> impl Future<Output = accord::Result<Self::Item>> + '_;
}

impl Follow for accord::MemberWatch {
    type Item = accord::MemberEvent;
    fn next(&mut self) -> impl Future<Output = accord::Result<Self::Item>> + '_ {
        accord::MemberWatch::next(self)
    }
}

impl Follow for accord::Observer {
    type Item = Option<accord::Leader>;
    fn next(&mut self) -> impl Future<Output = accord::Result<Self::Item>> + '_ {
        accord::Observer::next(self)
    }
}

/// The next report of `follow`, asked for by `next` futures each polled once and dropped, a
/// millisecond apart, until one has it: the first takes the announcement already delivered and
/// starts the read; the others must find that read under way (were each to start its own, none
/// would ever finish).
pub async fn next_after_drops<F: Follow>(follow: &mut F) -> F::Item {
    let started = Instant::now();
    loop {
        if let Some(report) = follow.next().now_or_never() {
            return report.unwrap();
        }
        assert!(
            started.elapsed() < REREAD_BOUND,
            "the change announced before the dropped reads is not reported"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
