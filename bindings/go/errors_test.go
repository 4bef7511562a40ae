package accord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Every sentinel, ErrInternal last.
var allKinds = []error{
	ErrInvalidArgument, ErrHeld, ErrDone, ErrTimeout, ErrCancelled, ErrLeaseLost,
	ErrConnection, ErrDatabase, ErrClosed, ErrUnsupported, ErrTrimmed, ErrInternal,
}

// kindsOf lists the sentinels err matches.
func kindsOf(err error) []error {
	var kinds []error
	for _, k := range allKinds {
		if errors.Is(err, k) {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// Every status libaccord has (walked through accord_status_name until a value has none) is one
// sentinel, named alike (ACCORD_LEASE_LOST and "accord: lease lost"), and every sentinel is the
// kind of exactly one status: the mapping is one to one with the core's error kinds, which
// libaccord's statuses are (bindings/c checks that side against the core).
func TestErrorKindsOneToOne(t *testing.T) {
	if name := statusName(0); name != "ACCORD_OK" {
		t.Fatalf("status 0 is named %q", name)
	}
	byKind := map[error]string{}
	status := 1
	for ; statusName(status) != ""; status++ {
		name := statusName(status)
		err := errorOf(status, "from libaccord")
		kinds := kindsOf(err)
		if len(kinds) != 1 {
			t.Errorf("%s matches %d sentinels: %v", name, len(kinds), kinds)
			continue
		}
		kind := kinds[0]
		if other, twice := byKind[kind]; twice {
			t.Errorf("%s and %s are both %v", other, name, kind)
		}
		byKind[kind] = name
		want := "accord: " + strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "ACCORD_"), "_", " "))
		if kind.Error() != want {
			t.Errorf("%s is the sentinel %q, want %q", name, kind.Error(), want)
		}
		var e *Error
		if !errors.As(err, &e) || e.Kind != kind || err.Error() != "from libaccord" {
			t.Errorf("%s: %#v", name, err)
		}
		// Without a message from libaccord, the sentinel's own.
		if got := errorOf(status, "").Error(); got != kind.Error() {
			t.Errorf("%s without a message: %q", name, got)
		}
	}
	if len(byKind) != len(allKinds) {
		t.Errorf("%d statuses for %d sentinels: %v", len(byKind), len(allKinds), byKind)
	}
	if status != len(sentinels) {
		t.Errorf("libaccord has statuses 0..%d, the sentinel table 0..%d", status-1, len(sentinels)-1)
	}
	// A status of a newer libaccord that this package does not know yet.
	if err := errorOf(status, "new"); !errors.Is(err, ErrInternal) {
		t.Errorf("unknown status %d: %v", status, kindsOf(err))
	}
}

// Each kind that can be provoked from Go is, through the package's API, and the error matches
// that sentinel and no other. ErrInternal is a bug in accord: nothing provokes it on purpose
// (bindings/c's Rust tests turn a panic into it).
func TestEveryErrorKindIsProvoked(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	o1, o2 := connect(t, ns, "o1"), connect(t, ns, "o2")
	held := must(o1.Acquire(ctx, "held", &AcquireOptions{TTL: time.Minute}))
	defer held.Release(ctx)
	nowhere := "postgres://accord@127.0.0.1:1/accord" // port 1 of the loopback: nothing listens

	provoke := map[error]func(t *testing.T) error{
		ErrInvalidArgument: func(t *testing.T) error {
			_, err := o1.TryAcquire(ctx, "", nil)
			return err
		},
		ErrHeld: func(t *testing.T) error {
			_, err := o2.TryAcquire(ctx, "held", nil)
			return err
		},
		ErrDone: func(t *testing.T) error {
			lease := must(o1.Acquire(ctx, "done", nil))
			if err := lease.Done(ctx, nil); err != nil {
				t.Fatal(err)
			}
			_, err := o2.TryAcquire(ctx, "done", nil)
			return err
		},
		ErrTimeout: func(t *testing.T) error {
			_, err := o2.Acquire(ctx, "held", &AcquireOptions{Timeout: 100 * time.Millisecond})
			return err
		},
		ErrCancelled: func(t *testing.T) error {
			// The key is held for a minute: only the cancel can end this wait.
			waitCtx, cancel := context.WithCancel(ctx)
			time.AfterFunc(100*time.Millisecond, cancel)
			_, err := o2.Acquire(waitCtx, "held", nil)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("a cancelled acquire does not match context.Canceled: %v", err)
			}
			return err
		},
		ErrLeaseLost: func(t *testing.T) error {
			lease := must(o1.Acquire(ctx, "released", nil))
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return lease.Renew(ctx, nil)
		},
		ErrConnection: func(t *testing.T) error {
			_, err := Connect(ctx, nowhere, &ClientOptions{ConnectTimeout: 5 * time.Second})
			return err
		},
		ErrDatabase: func(t *testing.T) error {
			// Without migrations, a schema that was never created is refused by the coordinator.
			_, err := Connect(ctx, databaseURL(t), &ClientOptions{
				Schema: fmt.Sprintf("absent_%d", time.Now().UnixNano()), DisableMigrations: true,
			})
			return err
		},
		ErrClosed: func(t *testing.T) error {
			c := must(Connect(ctx, databaseURL(t), &ClientOptions{Namespace: ns}))
			c.Close()
			_, err := c.TryAcquire(ctx, "k", nil)
			// The message is libaccord's (the core's), not one the Go package makes up.
			if err != nil && err.Error() == ErrClosed.Error() {
				t.Errorf("after Close: the sentinel's text only: %v", err)
			}
			return err
		},
		ErrTrimmed: func(t *testing.T) error {
			// Retention keeps the newest event: a subscription after seq 0 asks for deleted ones.
			must(o1.PublishMany(ctx, "trimmed", []string{"1", "2", "3"}))
			must(o1.SetStreamRetention(ctx, "trimmed", StreamRetention{MaxLen: 1}))
			_, err := o1.Subscribe(ctx, "trimmed", &SubscribeOptions{Start: StartAfter, After: 0})
			return err
		},
		ErrUnsupported: func(t *testing.T) error {
			// TLS client certificates are not supported (yet): refused before anything is sent.
			_, err := Connect(ctx, nowhere+"?sslcert=/nonexistent.pem", nil)
			return err
		},
	}
	for _, kind := range allKinds {
		f, ok := provoke[kind]
		if !ok {
			if kind != ErrInternal {
				t.Errorf("nothing provokes %v", kind)
			}
			continue
		}
		t.Run(strings.TrimPrefix(kind.Error(), "accord: "), func(t *testing.T) {
			err := f(t)
			if kinds := kindsOf(err); len(kinds) != 1 || kinds[0] != kind {
				t.Fatalf("got %v (sentinels %v), want %v", err, kinds, kind)
			}
		})
	}
}

// Issue 32: messages read in Go's words. Durations as time.Duration prints them (a 25 h TTL
// said "90000000 ms", a period "1m" said "60000 ms"), the options' fields by their Go names
// (TTL, HandoffTimeout, PageSize), and a wait's time without float noise.
func TestErrorsReadInGoWords(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	c := connect(t, ns, "o1")
	refusals := []struct {
		want string
		call func() error
	}{
		{"invalid TTL: 25h0m0s is outside the allowed range 100ms..=24h0m0s", func() error {
			_, err := c.Acquire(ctx, "k", &AcquireOptions{TTL: 25 * time.Hour})
			return err
		}},
		{"invalid period: 1m0s is outside 10ms..=TTL (5s)", func() error {
			_, err := c.Fleet(ctx, "f", &FleetOptions{Shards: 2, TTL: 5 * time.Second, Period: time.Minute})
			return err
		}},
		{"invalid HandoffTimeout: -1.5s is negative", func() error {
			_, err := c.Fleet(ctx, "f", &FleetOptions{Shards: 2, HandoffTimeout: -1500 * time.Millisecond})
			return err
		}},
		{"invalid MaxAge: 50ms is shorter than the least, 100ms", func() error {
			_, err := c.SetStreamRetention(ctx, "s", StreamRetention{MaxAge: 50 * time.Millisecond})
			return err
		}},
		{"invalid PageSize: 1001 is outside 1..=1000", func() error {
			_, err := c.Subscribe(ctx, "s", &SubscribeOptions{PageSize: 1001})
			return err
		}},
		{"invalid key: is not valid UTF-8", func() error {
			_, err := c.TryAcquire(ctx, "k\xff", nil)
			return err
		}},
	}
	for _, r := range refusals {
		if err := r.call(); !errors.Is(err, ErrInvalidArgument) || err.Error() != r.want {
			t.Errorf("got %v, want %q", err, r.want)
		}
	}
	held, err := c.Acquire(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	_, err = connect(t, ns, "o2").Acquire(ctx, "k", &AcquireOptions{Timeout: 200 * time.Millisecond})
	waited, found := strings.CutPrefix(fmt.Sprint(err), "timed out after ")
	waited, _, _ = strings.Cut(waited, " waiting")
	if !errors.Is(err, ErrTimeout) || !found {
		t.Fatalf("a wait that timed out: %v", err)
	}
	digits := 0
	for _, r := range waited {
		if r >= '0' && r <= '9' {
			digits++
		}
	}
	if _, parse := time.ParseDuration(waited); parse != nil || digits > 4 {
		t.Errorf("the time waited %q is no short Go duration: %v", waited, err)
	}
}
