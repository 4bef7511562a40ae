//! `Stats` and `Histogram`: what a client did, as `Client.stats()` reads it. Counters are
//! ints; durations are float seconds, as everywhere in the Python binding.

use pyo3::prelude::*;

/// One latency distribution of `Stats`: how many values, their sum, the largest, and two
/// percentiles, each in seconds (float). A percentile is the upper edge of its logarithmic
/// bucket: at most about 9% above the true value, never below it.
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct Histogram(accord::Histogram);

#[pymethods]
impl Histogram {
    /// Values recorded.
    #[getter]
    fn count(&self) -> u64 {
        self.0.count
    }
    /// Their sum in seconds (the mean is `sum / count`).
    #[getter]
    fn sum(&self) -> f64 {
        self.0.sum.as_secs_f64()
    }
    /// The largest, in seconds.
    #[getter]
    fn max(&self) -> f64 {
        self.0.max.as_secs_f64()
    }
    /// The median, in seconds.
    #[getter]
    fn p50(&self) -> f64 {
        self.0.p50.as_secs_f64()
    }
    /// The 99th percentile, in seconds.
    #[getter]
    fn p99(&self) -> f64 {
        self.0.p99.as_secs_f64()
    }

    fn __repr__(&self) -> String {
        format!(
            "Histogram(count={}, sum={:?}, max={:?}, p50={:?}, p99={:?})",
            self.count(),
            self.sum(),
            self.max(),
            self.p50(),
            self.p99()
        )
    }
}

/// What a client did since it connected (`Client.stats()`): counters of this client's calls
/// and events (int), and latency histograms (`Histogram`, in seconds).
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct Stats(accord::Stats);

impl From<accord::Stats> for Stats {
    fn from(s: accord::Stats) -> Self {
        Stats(s)
    }
}

#[pymethods]
impl Stats {
    /// Calls to acquire, try_acquire, claim and semaphore acquires.
    #[getter]
    fn acquires(&self) -> u64 {
        self.0.acquires
    }
    /// Leases granted (a claim of 50 counts 50).
    #[getter]
    fn grants(&self) -> u64 {
        self.0.grants
    }
    /// Tries that found the key held; claims that found nothing.
    #[getter]
    fn refusals(&self) -> u64 {
        self.0.refusals
    }
    /// Waiting acquires and claims that timed out.
    #[getter]
    fn timeouts(&self) -> u64 {
        self.0.timeouts
    }
    /// Waiting acquires and claims cancelled.
    #[getter]
    fn cancellations(&self) -> u64 {
        self.0.cancellations
    }
    /// Leases lost (the lost signal fired).
    #[getter]
    fn lost(&self) -> u64 {
        self.0.lost
    }
    /// Leases released (by the holder, a give-back, or close).
    #[getter]
    fn releases(&self) -> u64 {
        self.0.releases
    }
    /// Leases marked done.
    #[getter]
    fn done(&self) -> u64 {
        self.0.done
    }
    /// Notifications delivered to this client's subscriptions.
    #[getter]
    fn notifications(&self) -> u64 {
        self.0.notifications
    }
    /// Connections to the coordinator opened again after one broke.
    #[getter]
    fn reconnects(&self) -> u64 {
        self.0.reconnects
    }
    /// Statements sent to the coordinator, keepalive included.
    #[getter]
    fn statements(&self) -> u64 {
        self.0.statements
    }
    /// From the call to the grant, for acquires and claims that got one.
    #[getter]
    fn acquire_wait(&self) -> Histogram {
        Histogram(self.0.acquire_wait)
    }
    /// From the grant to its release, done or loss.
    #[getter]
    fn hold_time(&self) -> Histogram {
        Histogram(self.0.hold_time)
    }
    /// One statement's round trip, as the client saw it.
    #[getter]
    fn statement_time(&self) -> Histogram {
        Histogram(self.0.statement_time)
    }
    /// One keepalive tick's renew statement.
    #[getter]
    fn keepalive_tick(&self) -> Histogram {
        Histogram(self.0.keepalive_tick)
    }

    fn __repr__(&self) -> String {
        let s = &self.0;
        format!(
            "Stats(acquires={}, grants={}, refusals={}, timeouts={}, cancellations={}, lost={}, \
             releases={}, done={}, notifications={}, reconnects={}, statements={}, \
             acquire_wait={}, hold_time={}, statement_time={}, keepalive_tick={})",
            s.acquires,
            s.grants,
            s.refusals,
            s.timeouts,
            s.cancellations,
            s.lost,
            s.releases,
            s.done,
            s.notifications,
            s.reconnects,
            s.statements,
            self.acquire_wait().__repr__(),
            self.hold_time().__repr__(),
            self.statement_time().__repr__(),
            self.keepalive_tick().__repr__(),
        )
    }
}
