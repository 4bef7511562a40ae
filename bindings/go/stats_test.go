package accord

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Stats: a known sequence, then the counters exactly (docs/semantics.md, "Stats").
func TestStatsCountWhatTheClientDid(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	o1, o2 := connect(t, ns, "o1"), connect(t, ns, "o2")
	if s := o1.Stats(); s.Acquires != 0 || s.Grants != 0 || s.HoldTime != (Histogram{}) {
		t.Fatalf("fresh client: %+v", s)
	}
	lease := must(o1.TryAcquire(ctx, "a", &AcquireOptions{TTL: time.Minute}))
	if _, err := o2.TryAcquire(ctx, "a", &AcquireOptions{TTL: time.Minute}); !errors.Is(err, ErrHeld) {
		t.Fatalf("second try: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	s1 := o1.Stats()
	if s1.Acquires != 1 || s1.Grants != 1 || s1.Refusals != 0 || s1.Releases != 1 {
		t.Fatalf("o1 acquires %d grants %d refusals %d releases %d", s1.Acquires, s1.Grants, s1.Refusals, s1.Releases)
	}
	if s1.Timeouts != 0 || s1.Cancellations != 0 || s1.Lost != 0 || s1.Done != 0 || s1.Notifications != 0 {
		t.Fatalf("o1: %+v", s1)
	}
	if s1.AcquireWait.Count != 1 || s1.HoldTime.Count != 1 {
		t.Fatalf("o1 acquire wait %+v, hold time %+v", s1.AcquireWait, s1.HoldTime)
	}
	// Held for at least the 20 ms slept; percentiles never above the largest value.
	if h := s1.HoldTime; h.Max < 20*time.Millisecond || h.Sum != h.Max || h.P50 > h.Max || h.P99 > h.Max {
		t.Fatalf("hold time %+v", h)
	}
	if s1.Statements < 2 || s1.StatementTime.Count != s1.Statements || s1.StatementTime.Max <= 0 {
		t.Fatalf("statements %d, statement time %+v", s1.Statements, s1.StatementTime)
	}

	s2 := o2.Stats()
	if s2.Acquires != 1 || s2.Grants != 0 || s2.Refusals != 1 || s2.Releases != 0 || s2.AcquireWait.Count != 0 {
		t.Fatalf("o2: %+v", s2)
	}
	if s2.StatementTime.Count != s2.Statements {
		t.Fatalf("o2 statements %d, statement time %+v", s2.Statements, s2.StatementTime)
	}

	// A closed client still answers, with what it did.
	o2.Close()
	if s := o2.Stats(); s.Acquires != 1 || s.Refusals != 1 {
		t.Fatalf("closed o2: %+v", s)
	}
}
