//! What a client did: accord_client_stats() copies the core's counters and histograms into a
//! plain struct the caller owns.

use std::time::Duration;

use crate::client::accord_client;
use crate::error::{accord_error, accord_status, run};
use crate::ffi::{handle, out};

/// One latency distribution (see accord_stats). Durations in microseconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct accord_histogram {
    /// Values recorded.
    pub count: u64,
    /// Their sum, in µs (the mean is `sum_us / count`).
    pub sum_us: u64,
    /// The largest, in µs.
    pub max_us: u64,
    /// The median, in µs: the upper edge of its logarithmic bucket (at most about 9% above the
    /// true value, never below it).
    pub p50_us: u64,
    /// The 99th percentile, in µs, the same way.
    pub p99_us: u64,
}

/// What a client did since it connected (accord_client_stats()): counters of calls and events
/// of this client only, and latency histograms. A plain struct: the caller owns it, nothing to
/// free.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct accord_stats {
    /// Calls to acquire, try_acquire, claim and semaphore acquires.
    pub acquires: u64,
    /// Leases granted (a claim of 50 counts 50).
    pub grants: u64,
    /// Tries that found the key held, and claims that found nothing.
    pub refusals: u64,
    /// Waiting acquires and claims that timed out.
    pub timeouts: u64,
    /// Waiting acquires and claims cancelled.
    pub cancellations: u64,
    /// Leases lost (the lost signal fired).
    pub lost: u64,
    /// Leases released (by the holder, a give-back, or close).
    pub releases: u64,
    /// Leases marked done.
    pub done: u64,
    /// Notifications delivered to this client's subscriptions.
    pub notifications: u64,
    /// Connections to the coordinator opened again after one broke.
    pub reconnects: u64,
    /// Statements sent to the coordinator, keepalive included.
    pub statements: u64,
    /// From the call to the grant, for acquires and claims that got one.
    pub acquire_wait: accord_histogram,
    /// From the grant to its release, done or loss.
    pub hold_time: accord_histogram,
    /// One statement's round trip, as the client saw it.
    pub statement_time: accord_histogram,
    /// One keepalive tick's renew statement.
    pub keepalive_tick: accord_histogram,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl From<accord_core::Histogram> for accord_histogram {
    fn from(h: accord_core::Histogram) -> Self {
        accord_histogram {
            count: h.count,
            sum_us: micros(h.sum),
            max_us: micros(h.max),
            p50_us: micros(h.p50),
            p99_us: micros(h.p99),
        }
    }
}

impl From<accord_core::Stats> for accord_stats {
    fn from(s: accord_core::Stats) -> Self {
        accord_stats {
            acquires: s.acquires,
            grants: s.grants,
            refusals: s.refusals,
            timeouts: s.timeouts,
            cancellations: s.cancellations,
            lost: s.lost,
            releases: s.releases,
            done: s.done,
            notifications: s.notifications,
            reconnects: s.reconnects,
            statements: s.statements,
            acquire_wait: s.acquire_wait.into(),
            hold_time: s.hold_time.into(),
            statement_time: s.statement_time.into(),
            keepalive_tick: s.keepalive_tick.into(),
        }
    }
}

/// Fills `*out_stats` with what `client` did since it connected (docs/semantics.md, "Stats").
/// Never blocks (it reads counters), and works on a closed client too. NULL `client` or
/// `out_stats`: ACCORD_INVALID_ARGUMENT, and `*out_stats` is left as it was.
#[no_mangle]
pub extern "C" fn accord_client_stats(
    client: *const accord_client,
    out_stats: *mut accord_stats,
    err: *mut *mut accord_error,
) -> accord_status {
    run(err, || {
        let c = handle("client", client)?;
        let out_stats = out("out_stats", out_stats)?;
        *out_stats = c.client.stats().into();
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_become_whole_microseconds() {
        let h = accord_histogram::from(accord_core::Histogram {
            count: 3,
            sum: Duration::from_micros(3_500),
            max: Duration::from_nanos(2_000_999),
            p50: Duration::from_millis(1),
            p99: Duration::from_secs(2),
        });
        assert_eq!(
            h,
            accord_histogram {
                count: 3,
                sum_us: 3_500,
                max_us: 2_000,
                p50_us: 1_000,
                p99_us: 2_000_000,
            }
        );
    }

    #[test]
    fn null_arguments_are_invalid() {
        let mut stats = accord_stats::default();
        assert_eq!(
            accord_client_stats(std::ptr::null(), &mut stats, std::ptr::null_mut()),
            accord_status::ACCORD_INVALID_ARGUMENT
        );
    }
}
