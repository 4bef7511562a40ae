package accord

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// Membership and fleets: M1, F2, F4 of docs/semantics.md, and bad input.

func nextMember(t *testing.T, w *MemberWatch) MemberEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	return ev
}

func expectMember(t *testing.T, w *MemberWatch, kind MemberEventKind, owner string) MemberInfo {
	t.Helper()
	ev := nextMember(t, w)
	if ev.Kind != kind || len(ev.Members) != 1 || ev.Members[0].Owner != owner {
		t.Fatalf("watch: %+v, want kind %d of %s", ev, kind, owner)
	}
	return ev.Members[0]
}

// M1: join with metadata, members, update the metadata, watch (the members, Joined, Updated,
// Left for a member that left and for one whose client closed), leave.
func TestJoinMembersWatch(t *testing.T) { // M1
	ctx := context.Background()
	ns := namespace(t)
	a, b := connect(t, ns, "a"), connect(t, ns, "b")
	w := must(b.Watch(ctx, "team"))
	defer w.Close()
	if ev := nextMember(t, w); ev.Kind != MembersNow || len(ev.Members) != 0 {
		t.Fatalf("first event: %+v", ev)
	}
	// A short ttl: a member whose client closes without leaving is found gone at its expiry.
	ma := must(a.Join(ctx, "team", &JoinOptions{Metadata: map[string]any{"role": "lead"}, TTL: 2 * time.Second}))
	if ma.Group() != "team" || ma.Key() != "accord.group/team/a" || ma.Fence() <= 0 || ma.IsLost() || ma.Status() != LeaseHeld {
		t.Fatalf("member %s %s %d %v %s", ma.Group(), ma.Key(), ma.Fence(), ma.IsLost(), ma.Status())
	}
	joined := expectMember(t, w, MemberJoined, "a")
	if joined.Fence != ma.Fence() || joined.Metadata["role"] != "lead" || joined.Since.IsZero() || joined.ExpiresAt.Before(joined.Since) {
		t.Fatalf("joined: %+v", joined)
	}
	mb := must(b.Join(ctx, "team", &JoinOptions{TTL: time.Second}))
	expectMember(t, w, MemberJoined, "b")
	if err := mb.UpdateMetadata(ctx, map[string]any{"load": 3}); err != nil {
		t.Fatal(err)
	}
	if updated := expectMember(t, w, MemberUpdated, "b"); updated.Fence != mb.Fence() || updated.Metadata["load"] != float64(3) {
		t.Fatalf("updated: %+v", updated)
	}
	members := must(a.Members(ctx, "team"))
	if len(members) != 2 || members[0].Owner != "a" || members[1].Owner != "b" || members[1].Metadata["load"] != float64(3) {
		t.Fatalf("members: %+v", members)
	}
	if none := must(a.Members(ctx, "nobody")); len(none) != 0 {
		t.Fatalf("members of an empty group: %+v", none)
	}

	// Leaving: Left; the member answers ErrLeaseLost; leaving again is harmless; never Lost.
	if err := mb.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	expectMember(t, w, MemberLeft, "b")
	if err := mb.UpdateMetadata(ctx, nil); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("update after leave: %v", err)
	}
	if err := mb.Leave(ctx); err != nil || mb.Status() != LeaseReleased {
		t.Fatalf("leave again: %v, %s", err, mb.Status())
	}

	// A member whose client closes: its Lost closes, watchers see Left at its expiry (a close
	// sends no word; before watches reported updates, a notification of the update still
	// queued woke this read early).
	a.Close()
	select {
	case <-ma.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the member of a closed client is not lost")
	}
	expectMember(t, w, MemberLeft, "a")

	// Nothing more: the context ends a wait; a closed watch says ErrClosed.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := w.Next(short); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrCancelled) {
		t.Fatalf("a quiet watch: %v", err)
	}
	w.Close()
	if _, err := w.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("a closed watch: %v", err)
	}
	w.Close()
}

// fleetLog records the events of several fleet members in one order, each read by its own
// goroutine that asks for the next event only after logging the previous one.
type fleetLog struct {
	mu     sync.Mutex
	events []fleetEntry
	ended  map[string]error
}

type fleetEntry struct {
	who string
	ev  FleetEvent
}

func (l *fleetLog) read(who string, f *Fleet) {
	for {
		ev, err := f.Next(context.Background())
		l.mu.Lock()
		if err != nil {
			l.ended[who] = err
			l.mu.Unlock()
			return
		}
		l.events = append(l.events, fleetEntry{who, ev})
		l.mu.Unlock()
	}
}

// holds is what `who` holds by its events.
func (l *fleetLog) holds(who string) map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := map[string]int64{}
	for _, e := range l.events {
		if e.who != who {
			continue
		}
		if e.ev.Kind == Assigned {
			held[e.ev.Shard] = e.ev.Fence
		} else {
			delete(held, e.ev.Shard)
		}
	}
	return held
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// F2, F4: a member takes all 8 shards; a second joins and they split 4/4, each moved shard
// Revoked(handoff) on the first before it is Assigned (with a larger fence) to the second;
// Close hands back (Revoked(closed), then ErrClosed) and the first takes everything again.
// M2: watch reads whose context ends after a millisecond lose no change: Joined and Left still
// come, well before the 30 s safety re-read.
func TestWatchLosesNothingToDeadlines(t *testing.T) { // M2
	ctx := context.Background()
	ns := namespace(t)
	a, b := connect(t, ns, "a"), connect(t, ns, "b")
	w := must(b.Watch(ctx, "g"))
	defer w.Close()
	if ev := poll(t, w.Next); ev.Kind != MembersNow || len(ev.Members) != 0 {
		t.Fatalf("first event %+v", ev)
	}
	for round := 0; round < 3; round++ {
		m := must(a.Join(ctx, "g", &JoinOptions{TTL: time.Minute}))
		if ev := poll(t, w.Next); ev.Kind != MemberJoined || ev.Members[0].Fence != m.Fence() {
			t.Fatalf("round %d: %+v, want Joined at %d", round, ev, m.Fence())
		}
		if err := m.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		if ev := poll(t, w.Next); ev.Kind != MemberLeft || ev.Members[0].Fence != m.Fence() {
			t.Fatalf("round %d: %+v, want Left at %d", round, ev, m.Fence())
		}
	}
}

func TestFleetSplitsAndHandsOff(t *testing.T) { // F2, F4
	ctx := context.Background()
	ns := namespace(t)
	a, b := connect(t, ns, "a"), connect(t, ns, "b")
	opts := &FleetOptions{Shards: 8, TTL: 1500 * time.Millisecond, Period: 250 * time.Millisecond}
	log := &fleetLog{ended: map[string]error{}}
	fa := must(a.Fleet(ctx, "orders", opts))
	defer fa.Close()
	if fa.Name() != "orders" || fa.IsClosed() {
		t.Fatalf("fleet %q closed %v", fa.Name(), fa.IsClosed())
	}
	go log.read("a", fa)
	waitUntil(t, "a holds 8", 20*time.Second, func() bool { return len(log.holds("a")) == 8 })
	if got := fa.Shards(); len(got) != 8 || got[0] != "0" || got[7] != "7" {
		t.Fatalf("shards of a: %v", got)
	}
	first := log.holds("a")

	fb := must(b.Fleet(ctx, "orders", opts))
	defer fb.Close()
	go log.read("b", fb)
	if members := must(fb.Members(ctx)); len(members) != 2 || members[0].Owner != "a" || members[1].Owner != "b" {
		t.Fatalf("members: %+v", members)
	}
	waitUntil(t, "a and b hold 4 each", 30*time.Second, func() bool {
		return len(log.holds("a")) == 4 && len(log.holds("b")) == 4
	})
	if len(fa.Shards()) != 4 || len(fb.Shards()) != 4 {
		t.Fatalf("shards: a %v, b %v", fa.Shards(), fb.Shards())
	}
	log.mu.Lock()
	handedOff := map[string]bool{}
	for _, e := range log.events {
		switch {
		case e.who == "a" && e.ev.Kind == Revoked:
			if e.ev.Reason != RevokeHandoff || e.ev.Lease != nil || e.ev.Fence != first[e.ev.Shard] {
				t.Fatalf("a revoked: %+v", e.ev)
			}
			handedOff[e.ev.Shard] = true
		case e.who == "b":
			l := e.ev.Lease
			if e.ev.Kind != Assigned || !handedOff[e.ev.Shard] || e.ev.Fence <= first[e.ev.Shard] {
				t.Fatalf("b got %+v before a handed it off", e.ev)
			}
			if l == nil || l.Shard() != e.ev.Shard || l.Fence() != e.ev.Fence || !strings.HasSuffix(l.Key(), "/s/"+e.ev.Shard) || l.Status() != LeaseHeld || l.IsLost() {
				t.Fatalf("b's shard lease: %+v", l)
			}
		}
	}
	log.mu.Unlock()
	if len(handedOff) != 4 {
		t.Fatalf("%d shards handed off", len(handedOff))
	}

	// b closes: Revoked(closed) for its 4, then ErrClosed; a takes them back.
	bHeld := log.holds("b")
	if err := fb.Close(); err != nil || !fb.IsClosed() {
		t.Fatalf("close: %v", err)
	}
	waitUntil(t, "b's reader ends", 5*time.Second, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.ended["b"] != nil
	})
	if err := log.ended["b"]; !errors.Is(err, ErrClosed) {
		t.Fatalf("b ended with %v", err)
	}
	closed := 0
	log.mu.Lock()
	for _, e := range log.events {
		if e.who == "b" && e.ev.Kind == Revoked {
			if e.ev.Reason != RevokeClosed || e.ev.Fence != bHeld[e.ev.Shard] {
				t.Fatalf("b revoked: %+v", e.ev)
			}
			closed++
		}
	}
	log.mu.Unlock()
	if closed != 4 || len(fb.Shards()) != 0 {
		t.Fatalf("b closed %d, holds %v", closed, fb.Shards())
	}
	waitUntil(t, "a holds 8 again", 20*time.Second, func() bool { return len(log.holds("a")) == 8 })
	fa.Close()
	waitUntil(t, "a's reader ends", 5*time.Second, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.ended["a"] != nil
	})
	if held := log.holds("a"); len(held) != 0 {
		t.Fatalf("a still holds %v after close", held)
	}
}

// Next never reads ahead: a quiet fleet's Next ends with the context.
func TestFleetNextFollowsTheContext(t *testing.T) {
	ctx := context.Background()
	c := connect(t, namespace(t), "a")
	f := must(c.Fleet(ctx, "quiet", &FleetOptions{Keys: []string{"only"}, TTL: time.Second, Period: 200 * time.Millisecond}))
	defer f.Close()
	ev := must(f.Next(ctx))
	if ev.Kind != Assigned || ev.Shard != "only" || ev.Lease == nil || ev.Reason != "" {
		t.Fatalf("first event: %+v", ev)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := f.Next(short); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrCancelled) {
		t.Fatalf("a quiet fleet: %v", err)
	}
	// Closing the client closes the fleet: Revoked(closed), then ErrClosed.
	c.Close()
	ev = must(f.Next(ctx))
	if ev.Kind != Revoked || ev.Reason != RevokeClosed || ev.Shard != "only" {
		t.Fatalf("after the client closed: %+v", ev)
	}
	if _, err := f.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("a closed fleet: %v", err)
	}
}

// Bad input: ErrInvalidArgument naming the field; nothing joined or held.
func TestFleetBadInput(t *testing.T) {
	ctx := context.Background()
	c := connect(t, namespace(t), "o1")
	ok := FleetOptions{Shards: 4, TTL: 1500 * time.Millisecond}
	with := func(change func(*FleetOptions)) *FleetOptions {
		o := ok
		change(&o)
		return &o
	}
	cases := []struct {
		field string
		name  string
		opts  *FleetOptions
	}{
		{"shards", "f", nil},
		{"shards", "f", &FleetOptions{}},
		{"shards", "f", with(func(o *FleetOptions) { o.Shards = -1 })},
		{"shards", "f", with(func(o *FleetOptions) { o.Shards = 10001 })},
		{"keys", "f", &FleetOptions{Keys: []string{}}},
		{"keys", "f", &FleetOptions{Keys: []string{"x", "y", "x"}}},
		{"keys", "f", &FleetOptions{Keys: []string{"x", ""}}},
		{"keys", "f", with(func(o *FleetOptions) { o.Keys = []string{"x"} })},
		{"name", "", &ok},
		{"TTL", "f", with(func(o *FleetOptions) { o.TTL = 50 * time.Millisecond })},
		{"TTL", "f", with(func(o *FleetOptions) { o.TTL = -time.Second })},
		{"period", "f", with(func(o *FleetOptions) { o.Period = 5 * time.Millisecond })},
		{"period", "f", with(func(o *FleetOptions) { o.Period = 2 * time.Second })},
		{"MaxHandoffsPerPeriod", "f", with(func(o *FleetOptions) { o.MaxHandoffsPerPeriod = -1 })},
		{"MaxHandoffsPerPeriod", "f", with(func(o *FleetOptions) { o.MaxHandoffsPerPeriod = 1001 })},
		{"HandoffTimeout", "f", with(func(o *FleetOptions) { o.HandoffTimeout = -time.Second })},
		{"metadata", "f", with(func(o *FleetOptions) { o.Metadata = map[string]any{"bad": func() {}} })},
	}
	for _, tc := range cases {
		f, err := c.Fleet(ctx, tc.name, tc.opts)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) || f != nil {
			t.Errorf("%+v: %v, want ErrInvalidArgument naming %s", tc.opts, err, tc.field)
		}
	}
	joins := []struct {
		field string
		group string
		opts  *JoinOptions
	}{
		{"group", "", nil},
		{"TTL", "g", &JoinOptions{TTL: 50 * time.Millisecond}},
		{"TTL", "g", &JoinOptions{TTL: -time.Second}},
		{"metadata", "g", &JoinOptions{Metadata: map[string]any{"bad": make(chan int)}}},
	}
	for _, tc := range joins {
		m, err := c.Join(ctx, tc.group, tc.opts)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) || m != nil {
			t.Errorf("join %q %+v: %v, want ErrInvalidArgument naming %s", tc.group, tc.opts, err, tc.field)
		}
	}
	if _, err := c.Members(ctx, ""); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "group") {
		t.Errorf("members of \"\": %v", err)
	}
	if _, err := c.Watch(ctx, ""); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "group") {
		t.Errorf("watch of \"\": %v", err)
	}
	if page := must(c.List(ctx, &ListQuery{State: StateHeld})); len(page.Items) != 0 {
		t.Fatalf("held after bad input: %+v", page.Items)
	}
}
