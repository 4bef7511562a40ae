package accord

/*
#include "accord.h"
*/
import "C"

import (
	"runtime"
	"time"
)

// Histogram is one latency distribution of Stats: how many values, their sum, the largest, and
// two percentiles. Durations have microsecond resolution. A percentile is the upper edge of its
// logarithmic bucket: at most about 9% above the true value, never below it.
type Histogram struct {
	Count uint64
	Sum   time.Duration // the mean is Sum / Count
	Max   time.Duration
	P50   time.Duration
	P99   time.Duration
}

// Stats is what a client did since it connected (see docs/semantics.md, "Stats"): counters of
// this client's calls and events, and latency histograms.
type Stats struct {
	Acquires      uint64 // calls to Acquire, TryAcquire, Claim and semaphore acquires
	Grants        uint64 // leases granted (a claim of 50 counts 50)
	Refusals      uint64 // tries that found the key held; claims that found nothing
	Timeouts      uint64 // waiting acquires and claims that timed out
	Cancellations uint64 // waiting acquires and claims cancelled
	Lost          uint64 // leases lost (their Lost channel closed)
	Releases      uint64 // leases released (by the holder, a give-back, or Close)
	Done          uint64 // leases marked done
	Notifications uint64 // notifications delivered to this client's subscriptions
	Reconnects    uint64 // connections to the coordinator opened again after one broke
	Statements    uint64 // statements sent to the coordinator, keepalive included

	AcquireWait   Histogram // from the call to the grant, for calls that got one
	HoldTime      Histogram // from the grant to its release, done or loss
	StatementTime Histogram // one statement's round trip, as the client saw it
	KeepaliveTick Histogram // one keepalive tick's renew statement
}

func histogram(h C.accord_histogram) Histogram {
	us := func(v C.uint64_t) time.Duration { return time.Duration(v) * time.Microsecond }
	return Histogram{
		Count: uint64(h.count),
		Sum:   us(h.sum_us),
		Max:   us(h.max_us),
		P50:   us(h.p50_us),
		P99:   us(h.p99_us),
	}
}

// Stats reads what this client did since it connected. It never blocks (it reads counters)
// and answers after Close too.
func (c *Client) Stats() Stats {
	defer runtime.KeepAlive(c)
	var s C.accord_stats
	// Cannot fail: the client and the out-pointer are never NULL here.
	C.accord_client_stats(c.ptr, &s, nil)
	return Stats{
		Acquires:      uint64(s.acquires),
		Grants:        uint64(s.grants),
		Refusals:      uint64(s.refusals),
		Timeouts:      uint64(s.timeouts),
		Cancellations: uint64(s.cancellations),
		Lost:          uint64(s.lost),
		Releases:      uint64(s.releases),
		Done:          uint64(s.done),
		Notifications: uint64(s.notifications),
		Reconnects:    uint64(s.reconnects),
		Statements:    uint64(s.statements),
		AcquireWait:   histogram(s.acquire_wait),
		HoldTime:      histogram(s.hold_time),
		StatementTime: histogram(s.statement_time),
		KeepaliveTick: histogram(s.keepalive_tick),
	}
}
