package accord

import (
	"context"
	"errors"
	"runtime"
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

// After Close every call of the client is answered by libaccord (the core's ErrClosed and its
// message), not by the Go package; the handle is freed once the Client is garbage.
func TestCallsAfterCloseAreAnsweredByTheCore(t *testing.T) {
	ctx := context.Background()
	c := must(Connect(ctx, databaseURL(t), &ClientOptions{Namespace: namespace(t)}))
	c.Close()
	c.Close() // idempotent
	_, acquireErr := c.Acquire(ctx, "k", nil)
	_, tryErr := c.TryAcquire(ctx, "k", nil)
	_, resetErr := c.Reset(ctx, "k")
	_, listErr := c.List(ctx, nil)
	_, listenErr := c.Listen(ctx, "ch")
	for name, err := range map[string]error{
		"Acquire": acquireErr, "TryAcquire": tryErr, "Reset": resetErr, "List": listErr,
		"Notify": c.Notify(ctx, "ch", "x"), "Listen": listenErr,
	} {
		if !errors.Is(err, ErrClosed) || err.Error() == ErrClosed.Error() {
			t.Errorf("%s after Close: %v, want ErrClosed with libaccord's message", name, err)
		}
	}
	c = nil
	for i := 0; i < 3; i++ {
		runtime.GC() // runs the finalizer that frees the handle
	}
}
