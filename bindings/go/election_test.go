package accord

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Shared locks, fair waiting and elections: X1, X2, E1-E5 of docs/semantics.md, and bad input.
// Waiters are ordered without sleeps: each takes its place in line (QueuedCount) before the
// next one starts.

func untilQueued(t *testing.T, c *Client, n int) {
	t.Helper()
	waitUntil(t, "a place in line", 20*time.Second, func() bool { return c.QueuedCount() >= n })
}

type granted struct {
	lease *Lease
	err   error
}

// waitFor acquires key in the background; the result arrives on the channel.
func waitFor(c *Client, key string, opts *AcquireOptions) <-chan granted {
	ch := make(chan granted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, key, opts)
		ch <- granted{l, err}
	}()
	return ch
}

// X1: three shared holders at once (List shows each); an exclusive acquire waits for them, and
// once it waits a new shared try is refused; the exclusive is granted when the three release. A
// shared lease renews but cannot change the key's metadata or be marked done.
func TestSharedHoldersAndAWaitingWriter(t *testing.T) { // X1
	ctx := context.Background()
	ns := namespace(t)
	readers := []*Client{connect(t, ns, "r1"), connect(t, ns, "r2"), connect(t, ns, "r3")}
	writer, late := connect(t, ns, "w"), connect(t, ns, "r4")
	shared := &AcquireOptions{TTL: time.Minute, Shared: true}
	var held []*Lease
	for _, r := range readers {
		l := must(r.Acquire(ctx, "k", shared))
		if !l.Shared() {
			t.Fatal("a shared acquire gave an exclusive lease")
		}
		held = append(held, l)
	}
	page := must(writer.List(ctx, &ListQuery{Prefix: "k"}))
	var owners []string
	for _, it := range page.Items {
		if !it.Shared || it.State != StateHeld {
			t.Fatalf("list item %+v", it)
		}
		owners = append(owners, it.Owner)
	}
	sort.Strings(owners)
	if strings.Join(owners, ",") != "r1,r2,r3" {
		t.Fatalf("list owners %v", owners)
	}
	if err := held[0].Renew(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := held[0].Renew(ctx, map[string]any{"x": 1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("renew of a shared lease with metadata: %v", err)
	}
	if err := held[0].Done(ctx, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("done of a shared lease: %v", err)
	}

	if _, err := writer.TryAcquire(ctx, "k", nil); !errors.Is(err, ErrHeld) {
		t.Fatalf("exclusive try of a key held shared: %v", err)
	}
	w := waitFor(writer, "k", &AcquireOptions{TTL: time.Minute})
	untilQueued(t, writer, 1)
	// The exclusive acquire waits: a new shared one does not get in ahead of it.
	if _, err := late.TryAcquire(ctx, "k", shared); !errors.Is(err, ErrHeld) {
		t.Fatalf("shared try while a writer waits: %v", err)
	}
	for _, l := range held {
		select {
		case g := <-w:
			t.Fatalf("the writer was granted with a reader left: %+v", g)
		default:
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g := <-w
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.lease.Shared() || g.lease.Fence() <= held[2].Fence() {
		t.Fatalf("writer's lease: shared %v, fence %d after %d", g.lease.Shared(), g.lease.Fence(), held[2].Fence())
	}
	if err := g.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// X2: three clients queue on a held key in a known order and are granted in that order; each
// release wakes the head of the line only (wake-ups counted per client).
func TestFairWaitingGrantsInArrivalOrder(t *testing.T) { // X2
	ctx := context.Background()
	ns := namespace(t)
	holder := connect(t, ns, "h")
	clients := []*Client{connect(t, ns, "c0"), connect(t, ns, "c1"), connect(t, ns, "c2")}
	lease := must(holder.Acquire(ctx, "q", &AcquireOptions{TTL: time.Minute}))
	var waiting []<-chan granted
	for _, c := range clients {
		waiting = append(waiting, waitFor(c, "q", &AcquireOptions{TTL: time.Minute}))
		untilQueued(t, c, 1)
	}
	if _, err := holder.TryAcquire(ctx, "q", nil); !errors.Is(err, ErrHeld) {
		t.Fatalf("a try jumped the line: %v", err)
	}
	fence := lease.Fence()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Read in arrival order: a grant out of turn would hold the key while the earlier waiter
	// times out.
	for i, ch := range waiting {
		g := <-ch
		if g.err != nil {
			t.Fatalf("waiter %d: %v", i, g.err)
		}
		if g.lease.Fence() <= fence {
			t.Fatalf("waiter %d: fence %d after %d", i, g.lease.Fence(), fence)
		}
		fence = g.lease.Fence()
		for j, c := range clients {
			wantWoken, wantQueued := uint64(0), 0
			if j <= i {
				wantWoken = 1
			} else {
				wantQueued = 1
			}
			if c.WaiterWakeups() != wantWoken || c.QueuedCount() != wantQueued {
				t.Fatalf("after grant %d: c%d woken %d times, %d queued", i, j, c.WaiterWakeups(), c.QueuedCount())
			}
		}
		if err := g.lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// observed checks the observer's next leader, past at most one vacancy: a resignation frees
// the key before the campaigner in line, woken, takes it, and a read in between finds nobody
// leading.
func observed(t *testing.T, o *Observer, owner, value string, fence int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := o.Next(ctx)
	if err == nil && l == nil {
		l, err = o.Next(ctx)
	}
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	if l == nil || l.Owner != owner || l.Value != value || l.Fence != fence || l.Since.IsZero() || !l.ExpiresAt.After(l.Since) {
		t.Fatalf("observed %+v, want %s %s %d", l, owner, value, fence)
	}
}

type campaigned struct {
	leadership *Leadership
	err        error
}

// E1: two campaigners, one leader; Leader agrees from every client and an observer yields it.
// E3: Proclaim changes the value observers see, with the same fence. E2: the leader resigns,
// the waiting campaigner leads with a larger fence, and the observer sees it.
func TestElectionHandsOnInOrder(t *testing.T) { // E1-E3
	ctx := context.Background()
	ns := namespace(t)
	a, b, watcher := connect(t, ns, "a"), connect(t, ns, "b"), connect(t, ns, "watcher")
	ea, eb, ew := must(a.Election("primary")), must(b.Election("primary")), must(watcher.Election("primary"))
	if ew.Name() != "primary" {
		t.Fatalf("name %q", ew.Name())
	}
	if l := must(ew.Leader(ctx)); l != nil {
		t.Fatalf("a leader before any campaign: %+v", l)
	}
	obs := must(ew.Observe(ctx))
	defer obs.Close()

	la := must(ea.Campaign(ctx, "a-value", &CampaignOptions{TTL: time.Minute}))
	if la.Fence() <= 0 || la.Key() != "accord.election/primary" || la.Value() != "a-value" || la.IsLost() || la.Status() != LeaseHeld {
		t.Fatalf("leadership %d %s %s %v %s", la.Fence(), la.Key(), la.Value(), la.IsLost(), la.Status())
	}
	cb := make(chan campaigned, 1)
	go func() {
		l, err := eb.Campaign(ctx, "b-value", &CampaignOptions{TTL: time.Minute, Timeout: 20 * time.Second})
		cb <- campaigned{l, err}
	}()
	untilQueued(t, b, 1)
	for _, e := range []*Election{ea, eb, ew} {
		l := must(e.Leader(ctx))
		if l == nil || l.Owner != "a" || l.Value != "a-value" || l.Fence != la.Fence() {
			t.Fatalf("leader %+v", l)
		}
	}
	observed(t, obs, "a", "a-value", la.Fence())

	if err := la.Proclaim(ctx, "a-new"); err != nil {
		t.Fatal(err)
	}
	if la.Value() != "a-new" {
		t.Fatalf("value after proclaim %q", la.Value())
	}
	observed(t, obs, "a", "a-new", la.Fence())

	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-cb
	if c.err != nil {
		t.Fatal(c.err)
	}
	lb := c.leadership
	if lb.Fence() <= la.Fence() {
		t.Fatalf("fence %d after %d", lb.Fence(), la.Fence())
	}
	observed(t, obs, "b", "b-value", lb.Fence())
	// The resigned leadership: released, never lost; Proclaim refused, Resign again harmless.
	if la.Status() != LeaseReleased || la.IsLost() {
		t.Fatalf("resigned: %s %v", la.Status(), la.IsLost())
	}
	if err := la.Proclaim(ctx, "late"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("proclaim after resign: %v", err)
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatalf("resign again: %v", err)
	}

	// While b leads: a campaign ends with its timeout or its context, leaving no place in line.
	if _, err := ea.Campaign(ctx, "x", &CampaignOptions{Timeout: 100 * time.Millisecond}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("campaign past its timeout: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := ea.Campaign(short, "x", nil)
	cancel()
	// The deadline and the cancellation it triggers race: either kind, and the context's error.
	if !(errors.Is(err, ErrTimeout) || errors.Is(err, ErrCancelled)) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("campaign past its context's deadline: %v", err)
	}
	if a.QueuedCount() != 0 {
		t.Fatalf("%d places left in line", a.QueuedCount())
	}
	// The observer follows its context, and Close.
	short, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = obs.Next(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("observe with nothing new: %v", err)
	}
	obs.Close()
	if _, err := obs.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("next after close: %v", err)
	}

	// b's client closes: its leadership's Lost closes, and nobody leads.
	b.Close()
	select {
	case <-lb.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed by the client's close")
	}
	if l := must(ew.Leader(ctx)); l != nil {
		t.Fatalf("a leader after its client closed: %+v", l)
	}
}

func TestElectionBadInput(t *testing.T) {
	ctx := context.Background()
	c := connect(t, namespace(t), "o")
	for _, name := range []string{"", strings.Repeat("e", 600)} {
		if _, err := c.Election(name); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "election") {
			t.Fatalf("election %q: %v", name, err)
		}
	}
	e := must(c.Election("e"))
	if _, err := e.Campaign(ctx, "x", &CampaignOptions{TTL: 50 * time.Millisecond}); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "TTL") {
		t.Fatalf("campaign with a 50 ms ttl: %v", err)
	}
	if c.QueuedCount() != 0 || c.WaiterWakeups() != 0 {
		t.Fatalf("queued %d, woken %d", c.QueuedCount(), c.WaiterWakeups())
	}
}

// rereadBound is well before the 30 s safety re-read: a change lost by a read whose context
// ended half-way shows as this passing.
const rereadBound = 10 * time.Second

// poll asks next for the next change with 1 ms contexts until it comes (most end the read
// half-way, after it took the announcement).
func poll[T any](t *testing.T, next func(context.Context) (T, error)) T {
	t.Helper()
	started := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		v, err := next(ctx)
		cancel()
		if err == nil {
			return v
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("next: %v", err)
		}
		if time.Since(started) > rereadBound {
			t.Fatal("a read whose context ended lost the change")
		}
	}
}

// E4: an observer reports the current state first (nobody leads: nil), then every change,
// vacancies included: a resignation, and a leader whose process was killed, at its lease's
// expiry. E5: reads whose context ends after a millisecond lose no change.
func TestObserverReportsVacanciesAndLosesNothingToDeadlines(t *testing.T) { // E4, E5
	ctx := context.Background()
	ns := namespace(t)
	a, watcher := connect(t, ns, "a"), connect(t, ns, "watcher")
	ea, ew := must(a.Election("e4")), must(watcher.Election("e4"))
	obs := must(ew.Observe(ctx))
	defer obs.Close()
	if l := poll(t, obs.Next); l != nil {
		t.Fatalf("a leader before any campaign: %+v", l)
	}
	for round := 0; round < 3; round++ {
		la := must(ea.Campaign(ctx, "v", &CampaignOptions{TTL: time.Minute}))
		if l := poll(t, obs.Next); l == nil || l.Owner != "a" || l.Fence != la.Fence() {
			t.Fatalf("round %d: observed %+v, want a at %d", round, l, la.Fence())
		}
		if err := la.Proclaim(ctx, "w"); err != nil {
			t.Fatal(err)
		}
		if l := poll(t, obs.Next); l == nil || l.Value != "w" || l.Fence != la.Fence() {
			t.Fatalf("round %d: observed %+v, want the value w", round, l)
		}
		if err := la.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if l := poll(t, obs.Next); l != nil {
			t.Fatalf("round %d: observed %+v after the resignation, want a vacancy", round, l)
		}
	}

	// A leader in another process (the C test program), killed: nobody leads once its 1 s
	// lease expired.
	leader, err := filepath.Abs("../../target/test_accord")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leader); err != nil {
		t.Fatalf("the C test program is missing (make build-c-tests): %v", err)
	}
	cmd := exec.Command(leader, "lead-child", databaseURL(t), ns)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatal("the C leader said nothing")
	}
	var fence int64
	fmt.Sscan(lines.Text(), &fence)
	bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if l, err := obs.Next(bounded); err != nil || l == nil || l.Owner != "doomed" || l.Fence != fence {
		t.Fatalf("observed %+v (%v), want doomed at %d", l, err, fence)
	}
	cmd.Process.Kill()
	if l, err := obs.Next(bounded); err != nil || l != nil {
		t.Fatalf("observed %+v (%v) after the leader was killed, want a vacancy", l, err)
	}
}
