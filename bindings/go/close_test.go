package accord

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Closing a client ends its leases (docs/semantics.md, G12): the leases held at the close are
// given back and their Lost channel closes; afterwards Renew, Release and Done on any lease of
// the client give ErrClosed.
func TestCloseEndsEveryLease(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	o1 := connect(t, ns, "o1")
	held := must(o1.Acquire(ctx, "held", &AcquireOptions{TTL: time.Minute}))
	released := must(o1.Acquire(ctx, "released", &AcquireOptions{TTL: time.Minute}))
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held.Status() != LeaseHeld || released.Status() != LeaseReleased {
		t.Errorf("before the close: %s and %s, want held and released", held.Status(), released.Status())
	}
	o1.Close()
	select {
	case <-held.Lost():
	case <-time.After(20 * time.Second):
		t.Fatal("Lost did not close for a lease held at the close")
	}
	if !held.IsLost() {
		t.Error("IsLost is false after the close")
	}
	if released.IsLost() {
		t.Error("a lease released before the close was lost")
	}
	// The core says how each ended.
	if held.Status() != LeaseLost || held.LostReason() != "client_closed" {
		t.Errorf("held at the close: %s (%q), want lost (client_closed)", held.Status(), held.LostReason())
	}
	if released.Status() != LeaseReleased || released.LostReason() != "" {
		t.Errorf("released before the close: %s (%q), want released", released.Status(), released.LostReason())
	}
	for _, lease := range []*Lease{held, released} {
		for name, err := range map[string]error{
			"Renew":   lease.Renew(ctx, nil),
			"Release": lease.Release(ctx),
			"Done":    lease.Done(ctx, nil),
		} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s of %s after Close: %v, want ErrClosed", name, lease.Key(), err)
			}
		}
	}
	o2 := connect(t, ns, "o2")
	if lease, err := o2.TryAcquire(ctx, "held", &AcquireOptions{TTL: time.Minute}); err != nil || lease == nil {
		t.Fatalf("the close did not give the key back: %v %v", lease, err)
	}
}
