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

// Elections: the leader of an election is the exclusive holder of the key
// `accord.election/<name>`, so a Leadership is fenced, renewed and lost like a lease.
// Campaigners wait in line and are granted in arrival order.

// Election is an election of a client: Campaign to lead it, Leader to read its leader, Observe
// to follow its leaders. Its methods may be called from any goroutine.
type Election struct {
	client *Client
	ptr    *C.accord_election // freed when the Election is garbage
	name   string
}

// CampaignOptions of Campaign; nil means the client's ttl and waiting as long as the context
// allows. The zero value of each field means its default.
type CampaignOptions struct {
	// TTL of the leadership lease (0: the client's): a leader whose process dies is replaced
	// this long after its last renewal.
	TTL time.Duration
	// Timeout: how long Campaign waits to lead before ErrTimeout (0: as long as the context
	// allows).
	Timeout time.Duration
}

// Leader is the leader of an election as the coordinator records it.
type Leader struct {
	Owner     string    // the leading client's owner
	Value     string    // the value it campaigned with or last proclaimed
	Fence     int64     // the leadership's fence: larger for every new leader
	Since     time.Time // when this leadership began (the coordinator's clock)
	ExpiresAt time.Time // when it expires unless renewed
}

func leaderOf(l *C.accord_leader) Leader {
	return Leader{
		Owner:     C.GoString(l.owner),
		Value:     C.GoString(l.value),
		Fence:     int64(l.fence),
		Since:     time.UnixMilli(int64(l.since_ms)),
		ExpiresAt: time.UnixMilli(int64(l.expires_at_ms)),
	}
}

// Election opens the election name (checked here: ErrInvalidArgument naming "election"). It
// does not touch the coordinator.
func (c *Client) Election(name string) (*Election, error) {
	if err := noNUL("election", name); err != nil {
		return nil, err
	}
	cname := cstring(name)
	defer C.free(unsafe.Pointer(cname))
	var ptr *C.accord_election
	var cerr *C.accord_error
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_election(cp, cname, &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	e := &Election{client: c, ptr: ptr, name: C.GoString(C.accord_election_name(ptr))}
	runtime.SetFinalizer(e, (*Election).free)
	return e, nil
}

// Name is the election's name.
func (e *Election) Name() string { return e.name }

func (e *Election) free() {
	C.accord_election_free(e.ptr)
	e.ptr = nil
}

// Campaign waits in line to lead, then leads with value (what observers see). Cancelling ctx
// (or its deadline passing) ends the wait with an error matching both ErrCancelled/ErrTimeout
// and the context's error; in every failure nothing is left held and the place in line is
// given up.
func (e *Election) Campaign(ctx context.Context, value string, opts *CampaignOptions) (*Leadership, error) {
	if err := noNUL("value", value); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &CampaignOptions{}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(e)
	o := C.accord_campaign_options_new()
	defer C.accord_campaign_options_free(o)
	var cerr *C.accord_error
	if opts.TTL != 0 {
		if err := takeError(C.accord_campaign_options_set_ttl_ms(o, millis(opts.TTL), &cerr), cerr); err != nil {
			return nil, err
		}
	}
	deadline, hasDeadline := ctx.Deadline()
	timeout := waitTimeout(opts.Timeout, deadline, hasDeadline)
	if err := takeError(C.accord_campaign_options_set_timeout_ms(o, timeout, &cerr), cerr); err != nil {
		return nil, err
	}
	cvalue := cstring(value)
	defer C.free(unsafe.Pointer(cvalue))
	var ptr *C.accord_leadership
	err := withCancelToken(ctx, func(token *C.accord_cancel_token, cerr **C.accord_error) C.accord_status {
		return C.accord_election_campaign(e.ptr, cvalue, o, token, &ptr, cerr)
	})
	if err != nil {
		return nil, waitError(ctx, err, opts.Timeout, deadline, hasDeadline)
	}
	l := &Leadership{
		client: e.client,
		ptr:    ptr,
		key:    C.GoString(C.accord_leadership_key(ptr)),
		fence:  int64(C.accord_leadership_fence(ptr)),
		lost:   make(chan struct{}),
	}
	c := e.client
	c.lostMu.Lock()
	c.lost[l.fence] = l.lost
	c.lostMu.Unlock()
	runtime.SetFinalizer(l, (*Leadership).free)
	return l, nil
}

// Leader is the current leader, in one read; nil when nobody leads.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(e)
	var ptr *C.accord_leader
	var cerr *C.accord_error
	if err := takeError(C.accord_election_leader(e.ptr, &ptr, &cerr), cerr); err != nil {
		return nil, err
	}
	if ptr == nil {
		return nil, nil
	}
	defer C.accord_leader_free(ptr)
	leader := leaderOf(ptr)
	return &leader, nil
}

// Leadership is this client leading an election: a lease on `accord.election/<name>`, renewed
// with the client's other leases. Resign when done; a Leadership that becomes unreachable
// without a Resign resigns when the garbage collector finds it. Its methods may be called from
// any goroutine.
type Leadership struct {
	client *Client
	ptr    *C.accord_leadership // freed when the Leadership is garbage
	key    string
	fence  int64
	lost   chan struct{}
}

// Fence is the leadership's fence: pass it to what the leader writes, so that a deposed
// leader's late writes are refused.
func (l *Leadership) Fence() int64 { return l.fence }

// Key is the key of the leadership's lease (`accord.election/<name>`).
func (l *Leadership) Key() string { return l.key }

// Value is what observers see: the campaign's value or the last proclaimed (after Resign, the
// last one it led with).
func (l *Leadership) Value() string {
	defer runtime.KeepAlive(l)
	text := C.accord_leadership_value(l.ptr)
	defer C.accord_string_free(text)
	return C.GoString(text)
}

// Lost is closed when the leadership is lost (not renewed in time, or the client closed); never
// for one resigned.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// IsLost reports whether the leadership is lost.
func (l *Leadership) IsLost() bool {
	defer runtime.KeepAlive(l)
	return bool(C.accord_leadership_is_lost(l.ptr))
}

// Status is where the leadership's lease stands (LeaseReleased once resigned).
func (l *Leadership) Status() LeaseStatus {
	defer runtime.KeepAlive(l)
	return leaseStatus(C.accord_leadership_status(l.ptr))
}

// Proclaim changes the value observers see, without a new election (the fence stays). After
// Resign it gives ErrLeaseLost.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if err := noNUL("value", value); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cvalue := cstring(value)
	defer C.free(unsafe.Pointer(cvalue))
	defer runtime.KeepAlive(l)
	var cerr *C.accord_error
	return takeError(C.accord_leadership_proclaim(l.ptr, cvalue, &cerr), cerr)
}

// Resign stops leading now: the next campaigner in line leads. ErrLeaseLost if the leadership
// was already lost; resigning again is harmless.
func (l *Leadership) Resign(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer runtime.KeepAlive(l)
	var cerr *C.accord_error
	err := takeError(C.accord_leadership_resign(l.ptr, &cerr), cerr)
	if C.accord_leadership_status(l.ptr) == C.ACCORD_LEASE_STATUS_RELEASED {
		l.client.forgetLost(l.fence)
	}
	return err
}

func (l *Leadership) free() {
	C.accord_leadership_free(l.ptr) // a leadership not resigned resigns in the background
	l.ptr = nil
	l.client.forgetLost(l.fence)
}

// Observer yields an election's leaders: the current state (the leader, or nil when nobody
// leads), then every new leader, every proclaimed value and every vacancy (nil), each once, in
// order (fences never decrease). Read it from
// one goroutine at a time; Close may be called from any.
type Observer struct {
	ptr     *C.accord_observer // freed when the Observer is garbage
	closing sync.Once
}

// Observe follows the election. It listens before it returns, so that no change from then on
// is missed.
func (e *Election) Observe(ctx context.Context) (*Observer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(e)
	var ptr *C.accord_observer
	var cerr *C.accord_error
	if err := takeError(C.accord_election_observe(e.ptr, &ptr, &cerr), cerr); err != nil {
		return nil, err
	}
	o := &Observer{ptr: ptr}
	runtime.SetFinalizer(o, (*Observer).free)
	return o, nil
}

// Next waits for the next change of leadership, as long as ctx allows (its end gives an error
// matching both ErrCancelled and the context's error, and loses nothing: the next call reports
// what arrived meanwhile): the new leader or value, or nil for a vacancy (the leader resigned or
// expired and nobody leads yet). After Close, or once the client is closed, it gives an error
// matching ErrClosed.
func (o *Observer) Next(ctx context.Context) (*Leader, error) {
	defer runtime.KeepAlive(o)
	var ptr *C.accord_leader
	err := cancellable(ctx, func(token *C.accord_cancel_token, cerr **C.accord_error) C.accord_status {
		return C.accord_observer_next(o.ptr, -1, token, &ptr, cerr)
	})
	if err != nil || ptr == nil {
		return nil, err
	}
	defer C.accord_leader_free(ptr)
	leader := leaderOf(ptr)
	return &leader, nil
}

// Close stops the observer: a Next waiting returns ErrClosed, and so does every later one.
// Idempotent.
func (o *Observer) Close() error {
	o.closing.Do(func() { C.accord_observer_close(o.ptr) })
	runtime.KeepAlive(o)
	return nil
}

func (o *Observer) free() {
	C.accord_observer_free(o.ptr)
	o.ptr = nil
}
