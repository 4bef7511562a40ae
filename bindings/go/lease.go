package accord

// #include <stdlib.h>
// #include "accord.h"
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Lease is a held key. Release it when done (`defer lease.Release(ctx)`); a Lease that becomes
// unreachable without a Release is released when the garbage collector finds it. Its methods
// may be called from any goroutine.
type Lease struct {
	client *Client
	mu     sync.Mutex
	ptr    *C.accord_lease // nil once the lease is over (released, done, lost and released)
	key    string
	owner  string
	fence  int64
	ttl    time.Duration
	shared bool
	lost   chan struct{}
}

func (c *Client) adopt(ptr *C.accord_lease) *Lease {
	l := &Lease{
		client: c,
		ptr:    ptr,
		key:    C.GoString(C.accord_lease_key(ptr)),
		owner:  C.GoString(C.accord_lease_owner(ptr)),
		fence:  int64(C.accord_lease_fence(ptr)),
		ttl:    time.Duration(C.accord_lease_ttl_ms(ptr)) * time.Millisecond,
		shared: bool(C.accord_lease_is_shared(ptr)),
		lost:   make(chan struct{}),
	}
	c.lostMu.Lock()
	c.lost[l.fence] = l.lost
	c.lostMu.Unlock()
	runtime.SetFinalizer(l, (*Lease).free)
	return l
}

// Key is the key held.
func (l *Lease) Key() string { return l.key }

// Owner is the owner recorded for the lease.
func (l *Lease) Owner() string { return l.owner }

// Fence is this grant's fencing token: larger than every earlier grant's, of any key. Pass it
// to what you write, and have that refuse smaller ones.
func (l *Lease) Fence() int64 { return l.fence }

// TTL is the lease's time to live, renewed in the background.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Shared reports whether this is one of the key's shared holders (AcquireOptions.Shared).
func (l *Lease) Shared() bool { return l.shared }

// Lost is closed when the lease is lost: not renewed within its ttl (checked against a deadline
// that comes before anyone else could be granted the key), or ended by Client.Close. It is
// never closed for a lease released or done normally.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// IsLost reports whether the lease is lost, exactly (checked against its deadline now).
func (l *Lease) IsLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bool(C.accord_lease_is_lost(l.ptr))
}

// ExpiresAt is the expiry the coordinator last confirmed (its clock).
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.UnixMilli(int64(C.accord_lease_expires_at_ms(l.ptr)))
}

// Metadata is the key's metadata as of the latest grant, renew or done of this lease.
func (l *Lease) Metadata() (map[string]any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	text := C.accord_lease_metadata_json(l.ptr)
	defer C.accord_string_free(text)
	var m map[string]any
	if err := json.Unmarshal([]byte(C.GoString(text)), &m); err != nil {
		return nil, &Error{Kind: ErrInternal, Message: "metadata is not JSON: " + err.Error()}
	}
	return m, nil
}

func metadataJSON(m map[string]any) (*C.char, error) {
	if m == nil {
		return nil, nil
	}
	text, err := json.Marshal(m)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidArgument, Message: "invalid metadata: " + err.Error()}
	}
	return cstring(string(text)), nil
}

// call runs f on the handle, which lives until the lease is garbage: every answer after the
// lease ended (release again, done after done, anything after loss) is the core's. The core
// says when a lease ended: one released or done can no longer be lost, so its Lost channel
// leaves the client's table; a lost one stays there until the client's event loop closes it.
func (l *Lease) call(ctx context.Context, f func(*C.accord_lease, **C.accord_error) C.accord_status) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var cerr *C.accord_error
	err := takeError(f(l.ptr, &cerr), cerr)
	switch C.accord_lease_status(l.ptr) {
	case C.ACCORD_LEASE_STATUS_RELEASED, C.ACCORD_LEASE_STATUS_DONE:
		l.client.forgetLost(l.fence)
	}
	return err
}

// LeaseStatus is where a lease stands, as the core keeps it.
type LeaseStatus string

// The statuses of a lease.
const (
	LeaseHeld     LeaseStatus = "held"     // held and renewed in the background
	LeaseEnding   LeaseStatus = "ending"   // a Release or Done in flight (or failed on the way)
	LeaseReleased LeaseStatus = "released" // released
	LeaseDone     LeaseStatus = "done"     // marked done
	LeaseLost     LeaseStatus = "lost"     // lost: see LostReason
)

// Status is where the lease stands now (checked against its deadline, as IsLost is).
func (l *Lease) Status() LeaseStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return leaseStatus(C.accord_lease_status(l.ptr))
}

// leaseStatus is the Go status of a C one (of a lease, a member or a shard lease).
func leaseStatus(code C.accord_lease_status_code) LeaseStatus {
	switch code {
	case C.ACCORD_LEASE_STATUS_HELD:
		return LeaseHeld
	case C.ACCORD_LEASE_STATUS_ENDING:
		return LeaseEnding
	case C.ACCORD_LEASE_STATUS_RELEASED:
		return LeaseReleased
	case C.ACCORD_LEASE_STATUS_DONE:
		return LeaseDone
	default:
		return LeaseLost
	}
}

// LostReason says why the lease was lost ("not_renewed", "not_recorded", "client_closed",
// "forked"), or "" while it is not lost.
func (l *Lease) LostReason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	why := C.accord_lease_lost_reason(l.ptr)
	if why == nil {
		return ""
	}
	return C.GoString(why)
}

// Renew extends the lease now and merges metadata (may be nil) into the key's metadata; a
// shared lease renews with nil only (else ErrInvalidArgument). The lease also renews itself in
// the background.
func (l *Lease) Renew(ctx context.Context, metadata map[string]any) error {
	cm, err := metadataJSON(metadata)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cm))
	return l.call(ctx, func(p *C.accord_lease, e **C.accord_error) C.accord_status {
		return C.accord_lease_renew(p, cm, e)
	})
}

// Release frees the key and wakes its waiters. Releasing again, or after Done, is harmless;
// after the lease was lost it gives ErrLeaseLost.
func (l *Lease) Release(ctx context.Context) error {
	return l.call(ctx, func(p *C.accord_lease, e **C.accord_error) C.accord_status {
		return C.accord_lease_release(p, e)
	})
}

// Done marks the key done (never granted again until Reset), merging metadata (may be nil),
// and releases it. Done twice, or after the lease was lost, gives ErrLeaseLost; a shared lease
// gives ErrInvalidArgument (acquire the key exclusively to finish it).
func (l *Lease) Done(ctx context.Context, metadata map[string]any) error {
	cm, err := metadataJSON(metadata)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cm))
	return l.call(ctx, func(p *C.accord_lease, e **C.accord_error) C.accord_status {
		return C.accord_lease_done(p, cm, e)
	})
}

func (l *Lease) free() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.freeLocked()
}

func (l *Lease) freeLocked() {
	if l.ptr == nil {
		return
	}
	C.accord_lease_free(l.ptr) // a lease still held is released in the background
	l.ptr = nil
	l.client.forgetLost(l.fence)
	runtime.SetFinalizer(l, nil)
}

func (c *Client) forgetLost(fence int64) {
	c.lostMu.Lock()
	delete(c.lost, fence)
	c.lostMu.Unlock()
}
