//! What a client did, counted as it happens: counters and latency histograms, cheap enough to
//! leave on (a relaxed atomic add per event, no lock, no allocation), read with
//! [`crate::Client::stats`]. Every event also goes to the `metrics` facade, so that any
//! exporter a program installs (Prometheus, StatsD, OpenTelemetry) sees the same figures under
//! `accord_*` names; without an exporter those calls do nothing.
//!
//! Histograms keep counts in logarithmic buckets (eight per doubling, from 1 µs to about
//! 1.2 hours): a percentile is the upper edge of the bucket it falls in, so it is at most
//! about 9% above the true value, never below it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::ErrorKind;

/// Buckets per doubling of the value.
const PER_DOUBLING: u32 = 8;
/// Doublings covered above 1 µs (2^32 µs: about 1.2 hours); longer values go to the last bucket.
const DOUBLINGS: u32 = 32;
const BUCKETS: usize = (PER_DOUBLING * DOUBLINGS) as usize + 1;

/// One latency distribution as read: how many, their sum, the largest, and percentiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Values recorded.
    pub count: u64,
    /// Their sum (the mean is `sum / count`).
    pub sum: Duration,
    /// The largest.
    pub max: Duration,
    /// The median: the upper edge of its bucket (at most about 9% above the true value).
    pub p50: Duration,
    /// The 99th percentile, the same way.
    pub p99: Duration,
}

/// A client's counters and histograms since it connected. Counters count calls and events of
/// this client only; "statements" counts what it sent to the coordinator, keepalive included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls to acquire, try_acquire, claim and semaphore acquires.
    pub acquires: u64,
    /// Leases granted (a claim of 50 counts 50).
    pub grants: u64,
    /// Tries that found the key held, and claims that found nothing.
    pub refusals: u64,
    /// Waiting acquires and claims that timed out.
    pub timeouts: u64,
    /// Waiting acquires and claims cancelled (or their callers gone).
    pub cancellations: u64,
    /// Leases lost (the lost signal fired).
    pub lost: u64,
    /// Leases released (by the holder, a give-back, or close).
    pub releases: u64,
    /// Leases marked done.
    pub done: u64,
    /// Notifications delivered to this client's subscriptions.
    pub notifications: u64,
    /// Connections to the coordinator opened again after one broke (command or listening).
    pub reconnects: u64,
    /// Statements sent to the coordinator.
    pub statements: u64,
    /// From the call to the grant, for acquires and claims that got one.
    pub acquire_wait: Histogram,
    /// From the grant to its release, done or loss.
    pub hold_time: Histogram,
    /// One statement's round trip, as the client saw it.
    pub statement_time: Histogram,
    /// One keepalive tick's renew statement.
    pub keepalive_tick: Histogram,
}

/// Which counter an event bumps.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    Acquires,
    Grants,
    Refusals,
    Timeouts,
    Cancellations,
    Lost,
    Releases,
    Done,
    Notifications,
    Reconnects,
    Statements,
}

impl Counter {
    const ALL: [Counter; 11] = [
        Counter::Acquires,
        Counter::Grants,
        Counter::Refusals,
        Counter::Timeouts,
        Counter::Cancellations,
        Counter::Lost,
        Counter::Releases,
        Counter::Done,
        Counter::Notifications,
        Counter::Reconnects,
        Counter::Statements,
    ];

    /// The name under the `metrics` facade.
    fn metric(self) -> &'static str {
        match self {
            Counter::Acquires => "accord_acquires_total",
            Counter::Grants => "accord_grants_total",
            Counter::Refusals => "accord_refusals_total",
            Counter::Timeouts => "accord_timeouts_total",
            Counter::Cancellations => "accord_cancellations_total",
            Counter::Lost => "accord_lost_total",
            Counter::Releases => "accord_releases_total",
            Counter::Done => "accord_done_total",
            Counter::Notifications => "accord_notifications_total",
            Counter::Reconnects => "accord_reconnects_total",
            Counter::Statements => "accord_statements_total",
        }
    }
}

/// Which histogram a duration goes to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Timer {
    AcquireWait,
    HoldTime,
    StatementTime,
    KeepaliveTick,
}

impl Timer {
    const ALL: [Timer; 4] = [
        Timer::AcquireWait,
        Timer::HoldTime,
        Timer::StatementTime,
        Timer::KeepaliveTick,
    ];

    fn metric(self) -> &'static str {
        match self {
            Timer::AcquireWait => "accord_acquire_wait_seconds",
            Timer::HoldTime => "accord_hold_seconds",
            Timer::StatementTime => "accord_statement_seconds",
            Timer::KeepaliveTick => "accord_keepalive_tick_seconds",
        }
    }
}

struct Buckets {
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

/// The bucket of a value in µs: 0 for ≤ 1 µs, then `PER_DOUBLING` per doubling.
fn bucket(micros: f64) -> usize {
    if micros <= 1.0 {
        return 0;
    }
    let index = (micros.log2() * PER_DOUBLING as f64).ceil() as usize;
    index.min(BUCKETS - 1)
}

/// The upper edge of a bucket, in µs.
fn upper_edge(index: usize) -> f64 {
    2f64.powf(index as f64 / PER_DOUBLING as f64)
}

impl Buckets {
    fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket(ns as f64 / 1000.0)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    fn read(&self) -> Histogram {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let count: u64 = counts.iter().sum();
        let max = Duration::from_nanos(self.max_ns.load(Ordering::Relaxed));
        let percentile = |p: f64| {
            if count == 0 {
                return Duration::ZERO;
            }
            let rank = ((count as f64) * p).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    let edge = Duration::from_nanos((upper_edge(i) * 1000.0) as u64);
                    return edge.min(max);
                }
            }
            max
        };
        Histogram {
            count,
            sum: Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed)),
            max,
            p50: percentile(0.5),
            p99: percentile(0.99),
        }
    }
}

/// Where a client's events are counted; shared by its session, backend and leases.
pub(crate) struct Recorder {
    counters: [AtomicU64; Counter::ALL.len()],
    timers: [Buckets; Timer::ALL.len()],
    /// `ClientOptions::record_stats`: off only to measure what recording costs.
    enabled: bool,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new(true)
    }
}

impl Recorder {
    pub fn new(enabled: bool) -> Recorder {
        Recorder {
            counters: Default::default(),
            timers: Default::default(),
            enabled,
        }
    }

    pub fn add(&self, counter: Counter, n: u64) {
        if n == 0 || !self.enabled {
            return;
        }
        self.counters[counter as usize].fetch_add(n, Ordering::Relaxed);
        metrics::counter!(counter.metric()).increment(n);
    }

    /// One acquire or claim call ended: granted `Ok(n)` leases (0: refused, or nothing
    /// claimable in time), or failed.
    pub fn acquire_ended(&self, started: std::time::Instant, outcome: Result<usize, ErrorKind>) {
        self.add(Counter::Acquires, 1);
        match outcome {
            Ok(0) => self.add(Counter::Refusals, 1),
            Ok(n) => {
                self.add(Counter::Grants, n as u64);
                self.time(Timer::AcquireWait, started.elapsed());
            }
            Err(ErrorKind::Timeout) => self.add(Counter::Timeouts, 1),
            Err(ErrorKind::Cancelled) => self.add(Counter::Cancellations, 1),
            Err(_) => {}
        }
    }

    pub fn time(&self, timer: Timer, d: Duration) {
        if !self.enabled {
            return;
        }
        self.timers[timer as usize].record(d);
        metrics::histogram!(timer.metric()).record(d.as_secs_f64());
    }

    pub fn read(&self) -> Stats {
        let c = |counter: Counter| self.counters[counter as usize].load(Ordering::Relaxed);
        let t = |timer: Timer| self.timers[timer as usize].read();
        Stats {
            acquires: c(Counter::Acquires),
            grants: c(Counter::Grants),
            refusals: c(Counter::Refusals),
            timeouts: c(Counter::Timeouts),
            cancellations: c(Counter::Cancellations),
            lost: c(Counter::Lost),
            releases: c(Counter::Releases),
            done: c(Counter::Done),
            notifications: c(Counter::Notifications),
            reconnects: c(Counter::Reconnects),
            statements: c(Counter::Statements),
            acquire_wait: t(Timer::AcquireWait),
            hold_time: t(Timer::HoldTime),
            statement_time: t(Timer::StatementTime),
            keepalive_tick: t(Timer::KeepaliveTick),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_upper_edges_within_a_bucket() {
        let r = Recorder::default();
        for ms in 1..=100u64 {
            r.time(Timer::StatementTime, Duration::from_millis(ms));
        }
        let h = r.read().statement_time;
        assert_eq!(h.count, 100);
        assert_eq!(h.max, Duration::from_millis(100));
        assert_eq!(h.sum, Duration::from_millis(5050));
        // True p50 is 50 ms, p99 99 ms: never below, at most one bucket (2^(1/8), 9%) above.
        assert!(h.p50 >= Duration::from_millis(50) && h.p50 <= Duration::from_micros(54_600));
        assert!(h.p99 >= Duration::from_millis(99) && h.p99 <= Duration::from_millis(100));
        assert_eq!(r.read().acquire_wait, Histogram::default());
    }

    #[test]
    fn a_disabled_recorder_records_nothing() {
        let r = Recorder::new(false);
        r.add(Counter::Grants, 5);
        r.time(Timer::StatementTime, Duration::from_millis(3));
        r.acquire_ended(std::time::Instant::now(), Ok(1));
        assert_eq!(r.read(), Stats::default());
    }

    #[test]
    fn counters_add_up() {
        let r = Recorder::default();
        r.add(Counter::Grants, 50);
        r.add(Counter::Grants, 1);
        r.add(Counter::Lost, 0);
        let s = r.read();
        assert_eq!((s.grants, s.lost, s.acquires), (51, 0, 0));
    }
}
