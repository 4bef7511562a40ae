//! `client.stats()`: what a client did, as a plain object. Counters are numbers (exact up to
//! 2^53); durations are milliseconds as float numbers, in fields named `…Ms`.

use napi_derive::napi;

use crate::convert::millis;

/// One latency distribution of `Stats`, in milliseconds (float). A percentile is the upper
/// edge of its logarithmic bucket: at most about 9% above the true value, never below it.
#[napi(object, object_from_js = false)]
pub struct Histogram {
    /// Values recorded.
    pub count: f64,
    /// Their sum in ms (the mean is `sumMs / count`).
    pub sum_ms: f64,
    /// The largest, in ms.
    pub max_ms: f64,
    /// The median, in ms.
    pub p50_ms: f64,
    /// The 99th percentile, in ms.
    pub p99_ms: f64,
}

impl From<accord::Histogram> for Histogram {
    fn from(h: accord::Histogram) -> Self {
        Histogram {
            count: h.count as f64,
            sum_ms: millis(h.sum),
            max_ms: millis(h.max),
            p50_ms: millis(h.p50),
            p99_ms: millis(h.p99),
        }
    }
}

/// What a client did since it connected (`client.stats()`): counters of this client's calls
/// and events, and latency histograms.
#[napi(object, object_from_js = false)]
pub struct Stats {
    /// Calls to acquire, tryAcquire, claim and semaphore acquires.
    pub acquires: f64,
    /// Leases granted (a claim of 50 counts 50).
    pub grants: f64,
    /// Tries that found the key held; claims that found nothing.
    pub refusals: f64,
    /// Waiting acquires and claims that timed out.
    pub timeouts: f64,
    /// Waiting acquires and claims cancelled (aborted).
    pub cancellations: f64,
    /// Leases lost (their `lost` resolved).
    pub lost: f64,
    /// Leases released (by the holder, a give-back, or close).
    pub releases: f64,
    /// Leases marked done.
    pub done: f64,
    /// Notifications delivered to this client's subscriptions.
    pub notifications: f64,
    /// Connections to the coordinator opened again after one broke.
    pub reconnects: f64,
    /// Statements sent to the coordinator, keepalive included.
    pub statements: f64,
    /// From the call to the grant, for acquires and claims that got one.
    pub acquire_wait: Histogram,
    /// From the grant to its release, done or loss.
    pub hold_time: Histogram,
    /// One statement's round trip, as the client saw it.
    pub statement_time: Histogram,
    /// One keepalive tick's renew statement.
    pub keepalive_tick: Histogram,
}

impl From<accord::Stats> for Stats {
    fn from(s: accord::Stats) -> Self {
        Stats {
            acquires: s.acquires as f64,
            grants: s.grants as f64,
            refusals: s.refusals as f64,
            timeouts: s.timeouts as f64,
            cancellations: s.cancellations as f64,
            lost: s.lost as f64,
            releases: s.releases as f64,
            done: s.done as f64,
            notifications: s.notifications as f64,
            reconnects: s.reconnects as f64,
            statements: s.statements as f64,
            acquire_wait: s.acquire_wait.into(),
            hold_time: s.hold_time.into(),
            statement_time: s.statement_time.into(),
            keepalive_tick: s.keepalive_tick.into(),
        }
    }
}
