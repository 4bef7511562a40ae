package accord

// #include <stdlib.h>
// #include "accord.h"
import "C"

import (
	"context"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Fleets: docs/semantics.md, "Membership and fleets".

// FleetOptions of Client.Fleet, passed by pointer as every options struct of this package. The
// shards are required: Shards (n shards named "0" to "n-1", 1..10000) or Keys (1..10000
// distinct names), not both (nil options name neither: ErrInvalidArgument naming "shards"). The
// zero value of every other field means its default: the client's ttl, a period of a third of the ttl, hand-off requests of a
// quarter of the target share (at least 4) per period, a hand-off timeout of the ttl, no
// metadata.
type FleetOptions struct {
	Shards int
	Keys   []string
	// TTL of the member and shard leases: a member that dies loses its shards this long after
	// its last renewal.
	TTL time.Duration
	// Period: how often the member reads the fleet and rebalances (10 ms ..= TTL).
	Period time.Duration
	// MaxHandoffsPerPeriod: the most hand-offs this member asks for in one period (1..1000).
	MaxHandoffsPerPeriod int
	// HandoffTimeout: how long a holder asked for a shard waits for its user to finish with it
	// (the next call of Next) before releasing it anyway.
	HandoffTimeout time.Duration
	// Metadata of this member in the fleet's membership.
	Metadata map[string]any
}

// Fleet is this client's member of a fleet: it balances the fleet's shards with the other
// members in the background. Read what happens with Next; Close hands every shard back. A Fleet
// that becomes unreachable without a Close closes when the garbage collector finds it. Its
// methods may be called from any goroutine; Next is meant for one at a time.
type Fleet struct {
	client  *Client
	ptr     *C.accord_fleet // freed when the Fleet is garbage
	name    string
	closing sync.Once
}

// FleetEventKind says what a FleetEvent is.
type FleetEventKind int

// The kinds of fleet events.
const (
	// Assigned: this member now holds Shard; Lease is set.
	Assigned FleetEventKind = C.ACCORD_FLEET_EVENT_ASSIGNED
	// Revoked: this member no longer holds Shard (for RevokeHandoff: will not once Next is
	// called again, or the hand-off timeout passes); Reason is set.
	Revoked FleetEventKind = C.ACCORD_FLEET_EVENT_REVOKED
)

// RevokeReason says why a shard was revoked.
type RevokeReason string

// The reasons of a Revoked event.
const (
	// RevokeHandoff: another member asked for it. Do the hand-off's work (a checkpoint), then
	// call Next again, which releases it.
	RevokeHandoff RevokeReason = "handoff"
	// RevokeLost: its lease was lost (not renewed in time); someone else may get it after its
	// expiry.
	RevokeLost RevokeReason = "lost"
	// RevokeClosed: the fleet or its client was closed; it was given back.
	RevokeClosed RevokeReason = "closed"
)

// FleetEvent is what Next yields, in order per shard: Assigned, then Revoked, then perhaps
// Assigned again.
type FleetEvent struct {
	Kind  FleetEventKind
	Shard string
	// Fence of the grant assigned or revoked: pass it to the resources you write.
	Fence int64
	// Reason of a Revoked event ("" for Assigned).
	Reason RevokeReason
	// Lease of an Assigned event (nil for Revoked).
	Lease *ShardLease
}

// ShardLease is a shard's lease as the fleet's user sees it: its fence and its signals. The
// fleet holds, renews and releases the lease itself.
type ShardLease struct {
	ev    *C.accord_fleet_event // owns the C shard lease; freed when the ShardLease is garbage
	shard string
	key   string
	fence int64
	lost  chan struct{}
}

// Shard is the shard.
func (l *ShardLease) Shard() string { return l.shard }

// Key is the key of the shard's lease (`accord.fleet/<name>/s/<shard>`).
func (l *ShardLease) Key() string { return l.key }

// Fence of this grant of the shard: larger than every earlier grant's.
func (l *ShardLease) Fence() int64 { return l.fence }

// Lost is closed when the shard's lease is lost (before the coordinator could grant it to
// anyone else); never for a shard handed off or given back.
func (l *ShardLease) Lost() <-chan struct{} { return l.lost }

// IsLost reports whether the shard's lease is lost.
func (l *ShardLease) IsLost() bool {
	defer runtime.KeepAlive(l)
	return bool(C.accord_shard_lease_is_lost(l.ev.lease))
}

// Status is where the shard's lease stands (LeaseReleased once the fleet gave it back).
func (l *ShardLease) Status() LeaseStatus {
	defer runtime.KeepAlive(l)
	return leaseStatus(C.accord_shard_lease_status(l.ev.lease))
}

func (l *ShardLease) free() {
	C.accord_fleet_event_free(l.ev)
	l.ev = nil
}

// Fleet joins the fleet name and starts balancing its shards in the background.
func (c *Client) Fleet(ctx context.Context, name string, opts *FleetOptions) (*Fleet, error) {
	if err := noNUL("name", name); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &FleetOptions{}
	}
	if err := noNUL("keys", opts.Keys...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := C.accord_fleet_options_new()
	defer C.accord_fleet_options_free(o)
	var cerr *C.accord_error
	set := func(status C.accord_status) error { return takeError(status, cerr) }
	if opts.Shards != 0 {
		if err := set(C.accord_fleet_options_set_shards(o, C.int64_t(opts.Shards), &cerr)); err != nil {
			return nil, err
		}
	}
	if opts.Keys != nil {
		err := withStrings(opts.Keys, func(keys **C.char) error {
			return set(C.accord_fleet_options_set_keys(o, keys, C.size_t(len(opts.Keys)), &cerr))
		})
		if err != nil {
			return nil, err
		}
	}
	durations := []struct {
		value time.Duration
		apply func(C.int64_t) C.accord_status
	}{
		{opts.TTL, func(ms C.int64_t) C.accord_status { return C.accord_fleet_options_set_ttl_ms(o, ms, &cerr) }},
		{opts.Period, func(ms C.int64_t) C.accord_status { return C.accord_fleet_options_set_period_ms(o, ms, &cerr) }},
		{opts.HandoffTimeout, func(ms C.int64_t) C.accord_status {
			return C.accord_fleet_options_set_handoff_timeout_ms(o, ms, &cerr)
		}},
	}
	for _, d := range durations {
		if d.value != 0 {
			if err := set(d.apply(millis(d.value))); err != nil {
				return nil, err
			}
		}
	}
	if opts.MaxHandoffsPerPeriod != 0 {
		if err := set(C.accord_fleet_options_set_max_handoffs_per_period(o, C.int64_t(opts.MaxHandoffsPerPeriod), &cerr)); err != nil {
			return nil, err
		}
	}
	if opts.Metadata != nil {
		cm, err := metadataJSON(opts.Metadata)
		if err != nil {
			return nil, err
		}
		err = set(C.accord_fleet_options_set_metadata_json(o, cm, &cerr))
		C.free(unsafe.Pointer(cm))
		if err != nil {
			return nil, err
		}
	}
	cname := cstring(name)
	defer C.free(unsafe.Pointer(cname))
	var ptr *C.accord_fleet
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_fleet(cp, cname, o, &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	f := &Fleet{client: c, ptr: ptr, name: C.GoString(C.accord_fleet_name(ptr))}
	runtime.SetFinalizer(f, (*Fleet).free)
	return f, nil
}

// withStrings runs f with a C array of C copies of strs (cgo may not pass Go memory holding C
// pointers), freed afterwards.
func withStrings(strs []string, f func(**C.char) error) error {
	if len(strs) == 0 {
		return f(nil)
	}
	arr := (**C.char)(C.malloc(C.size_t(len(strs)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	defer C.free(unsafe.Pointer(arr))
	items := unsafe.Slice(arr, len(strs))
	for i, s := range strs {
		items[i] = cstring(s)
	}
	defer func() {
		for _, p := range items {
			C.free(unsafe.Pointer(p))
		}
	}()
	return f(arr)
}

// Name is the fleet's name.
func (f *Fleet) Name() string { return f.name }

// Shards lists the shards this member holds now, in name order.
func (f *Fleet) Shards() []string {
	defer runtime.KeepAlive(f)
	var arr **C.char
	var n C.size_t
	if C.accord_fleet_shards(f.ptr, &arr, &n, nil) != C.ACCORD_OK || n == 0 {
		return []string{}
	}
	defer C.accord_string_array_free(arr, n)
	shards := make([]string, 0, int(n))
	for _, s := range unsafe.Slice(arr, int(n)) {
		shards = append(shards, C.GoString(s))
	}
	return shards
}

// Members lists the fleet's live members, oldest first, in one read.
func (f *Fleet) Members(ctx context.Context) ([]MemberInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(f)
	var arr *C.accord_member_info
	var n C.size_t
	var cerr *C.accord_error
	if err := takeError(C.accord_fleet_members(f.ptr, &arr, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	defer C.accord_member_info_array_free(arr, n)
	return memberInfos(arr, n)
}

// Next waits for the fleet's next event, as long as ctx allows (its end gives an error matching
// both ErrCancelled and the context's error). Calling it acknowledges the previous event: a
// shard revoked for a hand-off (RevokeHandoff) is released now, or at the hand-off timeout,
// whichever comes first; so do the hand-off's work (a checkpoint) before calling Next again.
// Nothing is read ahead of the caller. Once the fleet is closed (Close, or its client's) and
// every event was read, it gives an error matching ErrClosed.
func (f *Fleet) Next(ctx context.Context) (FleetEvent, error) {
	defer runtime.KeepAlive(f)
	var ev *C.accord_fleet_event
	err := cancellable(ctx, func(token *C.accord_cancel_token, cerr **C.accord_error) C.accord_status {
		return C.accord_fleet_next_event(f.ptr, -1, token, &ev, cerr)
	})
	if err != nil {
		return FleetEvent{}, err
	}
	e := FleetEvent{
		Kind:  FleetEventKind(ev.kind),
		Shard: C.GoString(ev.shard),
		Fence: int64(ev.fence),
	}
	c := f.client
	if e.Kind == Assigned {
		l := &ShardLease{
			ev:    ev,
			shard: e.Shard,
			key:   C.GoString(C.accord_shard_lease_key(ev.lease)),
			fence: e.Fence,
			lost:  make(chan struct{}),
		}
		c.lostMu.Lock()
		c.lost[l.fence] = l.lost
		c.lostMu.Unlock()
		runtime.SetFinalizer(l, (*ShardLease).free)
		e.Lease = l
		return e, nil
	}
	e.Reason = RevokeReason(C.GoString(ev.reason_name))
	C.accord_fleet_event_free(ev)
	// The grant is over: a lost one closes its Lost channel (if the client's event loop did not
	// already); one handed off or given back never will.
	c.lostMu.Lock()
	if ch, ok := c.lost[e.Fence]; ok {
		if e.Reason == RevokeLost {
			close(ch)
		}
		delete(c.lost, e.Fence)
	}
	c.lostMu.Unlock()
	return e, nil
}

// Close hands every shard back: each yields a Revoked event with RevokeClosed (read them with
// Next, which then gives ErrClosed), and the other members take them at their next period; the
// membership is left. It returns once that is done. Idempotent.
func (f *Fleet) Close() error {
	f.closing.Do(func() { C.accord_fleet_close(f.ptr) })
	runtime.KeepAlive(f)
	return nil
}

// IsClosed reports whether the fleet stopped (closed, or its client closed).
func (f *Fleet) IsClosed() bool {
	defer runtime.KeepAlive(f)
	return bool(C.accord_fleet_is_closed(f.ptr))
}

func (f *Fleet) free() {
	C.accord_fleet_free(f.ptr) // a fleet not closed closes in the background
	f.ptr = nil
}
