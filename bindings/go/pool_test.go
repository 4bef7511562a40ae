package accord

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Work pools and semaphores: P1, P3, P4, P6 of docs/semantics.md, and bad input.

func poolKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return keys
}

func assertCounts(t *testing.T, c *Client, prefix string, want PoolCounts) {
	t.Helper()
	if got := must(c.Counts(context.Background(), prefix)); got != want {
		t.Fatalf("counts of %s: %+v, want %+v", prefix, got, want)
	}
}

// P1: an offer makes keys free and counted; offering again joins none and leaves a held key
// held and a done key done.
func TestOfferIsIdempotentAndCounted(t *testing.T) { // P1
	ctx := context.Background()
	c := connect(t, namespace(t), "o1")
	keys := poolKeys("files/", 200)
	if n := must(c.Offer(ctx, "files/", keys, map[string]any{"from": "go"})); n != 200 {
		t.Fatalf("joined %d", n)
	}
	assertCounts(t, c, "files/", PoolCounts{Free: 200})
	leases := must(c.Claim(ctx, "files/", &ClaimOptions{Limit: 2, TTL: time.Minute}))
	if len(leases) != 2 {
		t.Fatalf("claimed %d", len(leases))
	}
	if m := must(leases[0].Metadata()); m["from"] != "go" {
		t.Fatalf("metadata of a claimed key: %v", m)
	}
	if err := leases[1].Done(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := must(c.Offer(ctx, "files/", keys, nil)); n != 0 {
		t.Fatalf("offered again: joined %d", n)
	}
	counts := must(c.Counts(ctx, "files/"))
	if counts != (PoolCounts{Free: 198, Held: 1, Done: 1}) || counts.Total() != 200 {
		t.Fatalf("counts %+v", counts)
	}
	if leases[0].Status() != LeaseHeld {
		t.Fatalf("a held key after the offer: %s", leases[0].Status())
	}
	if err := leases[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertCounts(t, c, "files/", PoolCounts{Free: 199, Done: 1})
	assertCounts(t, c, "other/", PoolCounts{})
	if n := must(c.Offer(ctx, "files/", nil, nil)); n != 0 {
		t.Fatalf("an offer of nothing joined %d", n)
	}
}

// P3: one claim of 50 gives 50 leases of distinct keys with distinct fences.
func TestClaimIsBatched(t *testing.T) { // P3
	ctx := context.Background()
	c := connect(t, namespace(t), "o1")
	must(c.Offer(ctx, "batch/", poolKeys("batch/", 60), nil))
	leases := must(c.Claim(ctx, "batch/", &ClaimOptions{Limit: 50, TTL: time.Minute}))
	if len(leases) != 50 {
		t.Fatalf("claimed %d", len(leases))
	}
	keys, fences := map[string]bool{}, map[int64]bool{}
	for _, l := range leases {
		if !strings.HasPrefix(l.Key(), "batch/") || l.TTL() != time.Minute {
			t.Fatalf("lease %s ttl %v", l.Key(), l.TTL())
		}
		keys[l.Key()], fences[l.Fence()] = true, true
	}
	if len(keys) != 50 || len(fences) != 50 {
		t.Fatalf("%d distinct keys, %d distinct fences", len(keys), len(fences))
	}
	assertCounts(t, c, "batch/", PoolCounts{Free: 10, Held: 50})
	// nil options: one key.
	if more := must(c.Claim(ctx, "batch/", nil)); len(more) != 1 || keys[more[0].Key()] {
		t.Fatalf("one more: %v", more)
	}
	for _, l := range leases {
		l.Release(ctx)
	}
}

// P4: a claim with a timeout on an exhausted pool comes back empty (not failed) when the
// timeout passes, and is woken by a release long before it; the context ends a wait.
func TestWaitingClaimIsWoken(t *testing.T) { // P4
	ctx := context.Background()
	ns := namespace(t)
	o1, o2 := connect(t, ns, "o1"), connect(t, ns, "o2")
	must(o1.Offer(ctx, "jobs/", []string{"jobs/a"}, nil))
	held := must(o1.Claim(ctx, "jobs/", &ClaimOptions{TTL: time.Minute}))
	if len(held) != 1 {
		t.Fatalf("claimed %d", len(held))
	}
	if none := must(o2.Claim(ctx, "jobs/", nil)); len(none) != 0 {
		t.Fatalf("an exhausted pool gave %d", len(none))
	}
	started := time.Now()
	if none := must(o2.Claim(ctx, "jobs/", &ClaimOptions{Timeout: 200 * time.Millisecond})); len(none) != 0 {
		t.Fatalf("an exhausted pool gave %d", len(none))
	}
	if time.Since(started) < 200*time.Millisecond {
		t.Fatalf("empty after %v, before the timeout", time.Since(started))
	}

	type result struct {
		leases []*Lease
		err    error
		at     time.Time
	}
	got := make(chan result, 1)
	go func() {
		// The holder's ttl is a minute: granted within the 20 s timeout only through the release.
		leases, err := o2.Claim(ctx, "jobs/", &ClaimOptions{Timeout: 20 * time.Second, TTL: time.Minute})
		got <- result{leases, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	releasedAt := time.Now()
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || len(r.leases) != 1 {
		t.Fatalf("woken claim: %v %v", r.leases, r.err)
	}
	if r.at.Before(releasedAt) || r.leases[0].Key() != "jobs/a" || r.leases[0].Fence() <= held[0].Fence() {
		t.Fatalf("claimed %s (fence %d) at %v, released at %v", r.leases[0].Key(), r.leases[0].Fence(), r.at, releasedAt)
	}
	defer r.leases[0].Release(ctx)

	// A wait without limit ends with its context; nothing more is held.
	waitCtx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	leases, err := o1.Claim(waitCtx, "jobs/", &ClaimOptions{Timeout: -1})
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) || leases != nil {
		t.Fatalf("a cancelled claim: %v %v", leases, err)
	}
	// The context's deadline bounds the wait.
	deadline, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if _, err := o1.Claim(deadline, "jobs/", &ClaimOptions{Timeout: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a claim past its context's deadline: %v", err)
	}
	assertCounts(t, o1, "jobs/", PoolCounts{Held: 1})
}

// P6: a semaphore of 3 admits 3 of 5 contenders; a full one times out; a release admits.
func TestSemaphoreAdmitsItsLimit(t *testing.T) { // P6
	ctx := context.Background()
	ns := namespace(t)
	a, b := connect(t, ns, "a"), connect(t, ns, "b")
	var sems []*Semaphore
	for i := 0; i < 5; i++ {
		c := a
		if i%2 == 1 {
			c = b
		}
		sems = append(sems, must(c.Semaphore(ctx, "s", 3)))
	}
	if sems[0].Name() != "s" || sems[0].Limit() != 3 {
		t.Fatalf("semaphore %q %d", sems[0].Name(), sems[0].Limit())
	}
	var holders []*Lease
	permits := map[string]bool{}
	for _, s := range sems {
		lease, err := s.TryAcquire(ctx, &AcquireOptions{TTL: time.Minute})
		switch {
		case err == nil:
			holders = append(holders, lease)
			permits[lease.Key()] = true
		case errors.Is(err, ErrHeld) && lease == nil:
		default:
			t.Fatalf("try_acquire: %v", err)
		}
	}
	if len(holders) != 3 || len(permits) != 3 {
		t.Fatalf("%d holders of %d permits", len(holders), len(permits))
	}
	if _, err := sems[4].Acquire(ctx, &AcquireOptions{Timeout: 200 * time.Millisecond}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a full semaphore: %v", err)
	}
	if err := holders[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := must(sems[4].Acquire(ctx, &AcquireOptions{Timeout: 20 * time.Second}))
	if got.Key() != holders[0].Key() {
		t.Fatalf("got %s, %s was released", got.Key(), holders[0].Key())
	}
	got.Release(ctx)
	for _, l := range holders[1:] {
		l.Release(ctx)
	}
}

// Bad input: ErrInvalidArgument naming the argument, and nothing offered, claimed or held.
func TestPoolBadInput(t *testing.T) {
	ctx := context.Background()
	c := connect(t, namespace(t), "o1")
	invalid := func(what, field string, err error) {
		t.Helper()
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := c.Offer(ctx, "", []string{"x"}, nil)
	invalid("empty prefix", "prefix", err)
	_, err = c.Offer(ctx, "jobs/", []string{"elsewhere/1"}, nil)
	invalid("key outside the prefix", "key", err)
	_, err = c.Offer(ctx, "jobs/", []string{"jobs/"}, nil)
	invalid("key equal to the prefix", "key", err)
	_, err = c.Offer(ctx, "jobs/", []string{"jobs/1"}, map[string]any{"f": func() {}})
	invalid("unencodable metadata", "metadata", err)
	assertCounts(t, c, "jobs/", PoolCounts{})
	must(c.Offer(ctx, "jobs/", []string{"jobs/1"}, nil))
	for _, limit := range []int{-1, 1001} {
		leases, err := c.Claim(ctx, "jobs/", &ClaimOptions{Limit: limit})
		invalid(fmt.Sprintf("limit %d", limit), "limit", err)
		if leases != nil {
			t.Fatalf("limit %d: %v", limit, leases)
		}
	}
	_, err = c.Claim(ctx, "", nil)
	invalid("empty prefix", "prefix", err)
	_, err = c.Claim(ctx, "jobs/", &ClaimOptions{TTL: time.Millisecond})
	invalid("ttl 1ms", "TTL", err)
	_, err = c.Counts(ctx, "")
	invalid("empty prefix", "prefix", err)
	for _, limit := range []int{0, -1, 10001} {
		_, err = c.Semaphore(ctx, "s", limit)
		invalid(fmt.Sprintf("semaphore limit %d", limit), "limit", err)
	}
	_, err = c.Semaphore(ctx, "", 1)
	invalid("empty semaphore name", "name", err)
	if page := must(c.List(ctx, &ListQuery{State: StateHeld})); len(page.Items) != 0 {
		t.Fatalf("held after bad input: %+v", page.Items)
	}
	assertCounts(t, c, "jobs/", PoolCounts{Free: 1})
}

// Pools work the same on the embedded stores.
func TestPoolsOnEmbeddedStores(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "accord.db")
	for _, url := range []string{"sqlite://" + path, "memory:go-pool-tests"} {
		a := must(Connect(ctx, url, nil))
		b := must(Connect(ctx, url, nil))
		if n := must(a.Offer(ctx, "job/", []string{"job/1", "job/2"}, nil)); n != 2 {
			t.Fatalf("%s: joined %d", url, n)
		}
		leases := must(b.Claim(ctx, "job/", &ClaimOptions{Limit: 5}))
		if len(leases) != 2 {
			t.Fatalf("%s: claimed %d", url, len(leases))
		}
		if err := leases[0].Done(ctx, nil); err != nil {
			t.Fatal(err)
		}
		assertCounts(t, a, "job/", PoolCounts{Held: 1, Done: 1})
		s := must(a.Semaphore(ctx, "s", 1))
		lease := must(s.TryAcquire(ctx, nil))
		if _, err := s.TryAcquire(ctx, nil); !errors.Is(err, ErrHeld) {
			t.Fatalf("%s: a full semaphore: %v", url, err)
		}
		lease.Release(ctx)
		a.Close()
		b.Close()
	}
}
