package accord

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Durable streams through the Go API: replay then live, latest, a consumer resuming after its
// ack, retention and ErrTrimmed, payload bytes, bad input, and how a subscription ends.

func nextStreamEvent(t *testing.T, s *StreamSubscription) StreamEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil || ev == nil {
		t.Fatalf("next of %s: %v %v", s.Stream(), ev, err)
	}
	return *ev
}

func expectStreamEvent(t *testing.T, s *StreamSubscription, seq int64, payload string) {
	t.Helper()
	ev := nextStreamEvent(t, s)
	if ev.Seq != seq || ev.Payload != payload || ev.Stream != s.Stream() {
		t.Fatalf("got %d %q on %s, want %d %q", ev.Seq, ev.Payload, ev.Stream, seq, payload)
	}
	if ev.PublishedAt.IsZero() || time.Since(ev.PublishedAt) > time.Hour {
		t.Fatalf("published at %v", ev.PublishedAt)
	}
	if s.Position() != seq {
		t.Fatalf("position %d after seq %d", s.Position(), seq)
	}
}

func TestStreamReplayThenLiveAndLatest(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	pub, sub := connect(t, ns, "pub"), connect(t, ns, "sub")
	seqs := must(pub.PublishMany(ctx, "s", []string{"one", "two", "three"}))
	if len(seqs) != 3 || seqs[0] != 1 || seqs[2] != 3 {
		t.Fatalf("seqs %v", seqs)
	}
	early := must(sub.Subscribe(ctx, "s", &SubscribeOptions{Start: StartEarliest}))
	defer early.Close()
	late := must(sub.Subscribe(ctx, "s", nil)) // nil: the defaults (latest)
	defer late.Close()
	if early.Position() != 0 || late.Position() != 3 || early.Consumer() != "" {
		t.Fatalf("positions %d %d", early.Position(), late.Position())
	}
	for i, p := range []string{"one", "two", "three"} {
		expectStreamEvent(t, early, int64(i+1), p)
	}
	if seq := must(pub.Publish(ctx, "s", "live")); seq != 4 {
		t.Fatalf("live seq %d", seq)
	}
	expectStreamEvent(t, early, 4, "live")
	// The channel API delivers the same.
	select {
	case ev := <-late.Events():
		if ev.Seq != 4 || ev.Payload != "live" {
			t.Fatalf("latest got %+v", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("latest got nothing")
	}
	// A deadline ends a wait with both errors; the next event is not lost by it.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if ev, err := early.Next(short); ev != nil || !errors.Is(err, ErrCancelled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("next past the deadline: %v %v", ev, err)
	}
	must(pub.Publish(ctx, "s", ""))
	expectStreamEvent(t, early, 5, "")
	if err := early.Ack(ctx, 5); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "consumer") {
		t.Fatalf("ack without a consumer: %v", err)
	}
	// Close ends the Events channel with no error.
	late.Close()
	for range late.Events() {
	}
	if err := late.Err(); err != nil {
		t.Fatalf("Err after Close: %v", err)
	}
}

func TestStreamConsumerResumesAfterAck(t *testing.T) {
	ctx := context.Background()
	c := connect(t, namespace(t), "o1")
	must(c.PublishMany(ctx, "s", []string{"1", "2", "3", "4"}))
	s := must(c.Subscribe(ctx, "s", &SubscribeOptions{Start: StartEarliest, Consumer: "c1", PageSize: 1}))
	if s.Consumer() != "c1" {
		t.Fatalf("consumer %q", s.Consumer())
	}
	expectStreamEvent(t, s, 1, "1")
	expectStreamEvent(t, s, 2, "2")
	if err := s.Ack(ctx, 3); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "seq") {
		t.Fatalf("ack of an undelivered seq: %v", err)
	}
	if err := s.Ack(ctx, 2); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Earliest applies only without a stored position: the consumer resumes after its ack.
	s = must(c.Subscribe(ctx, "s", &SubscribeOptions{Start: StartEarliest, Consumer: "c1"}))
	expectStreamEvent(t, s, 3, "3")
	s.Close()
	// StartAfter seeks, whatever the stored position.
	s = must(c.Subscribe(ctx, "s", &SubscribeOptions{Start: StartAfter, After: 3, Consumer: "c1"}))
	expectStreamEvent(t, s, 4, "4")
	s.Close()
}

func TestStreamRetentionAndTrimmed(t *testing.T) {
	ctx := context.Background()
	c := connect(t, namespace(t), "o1")
	info := must(c.StreamInfo(ctx, "r"))
	if info.Stream != "r" || info.FirstSeq != 1 || info.LastSeq != 0 || info.Retention != (StreamRetention{}) {
		t.Fatalf("never published: %+v", info)
	}
	must(c.PublishMany(ctx, "r", []string{"1", "2", "3", "4", "5"}))
	reader := must(c.Subscribe(ctx, "r", &SubscribeOptions{Start: StartEarliest, PageSize: 1}))
	defer reader.Close()
	expectStreamEvent(t, reader, 1, "1")
	if n := must(c.SetStreamRetention(ctx, "r", StreamRetention{MaxLen: 2})); n != 3 {
		t.Fatalf("trimmed %d", n)
	}
	info = must(c.StreamInfo(ctx, "r"))
	if info.FirstSeq != 4 || info.LastSeq != 5 || info.Retention != (StreamRetention{MaxLen: 2}) {
		t.Fatalf("after the trim: %+v", info)
	}
	if _, err := c.Subscribe(ctx, "r", &SubscribeOptions{Start: StartAfter, After: 1}); !errors.Is(err, ErrTrimmed) ||
		!strings.Contains(err.Error(), "starts at seq 4") {
		t.Fatalf("subscribe after a trimmed seq: %v", err)
	}
	// The reader had not read 2 and 3: ErrTrimmed, then it has ended.
	if ev, err := reader.Next(ctx); ev != nil || !errors.Is(err, ErrTrimmed) {
		t.Fatalf("reader after the trim: %v %v", ev, err)
	}
	if ev, err := reader.Next(ctx); ev != nil || err != nil {
		t.Fatalf("reader after ErrTrimmed: %v %v", ev, err)
	}
	must(c.SetStreamRetention(ctx, "r", StreamRetention{MaxAge: time.Minute}))
	if info = must(c.StreamInfo(ctx, "r")); info.Retention != (StreamRetention{MaxAge: time.Minute}) {
		t.Fatalf("max age: %+v", info)
	}
	if n := must(c.SetStreamRetention(ctx, "r", StreamRetention{})); n != 0 {
		t.Fatalf("keep all trimmed %d", n)
	}
}

func TestStreamPayloadBytes(t *testing.T) {
	ctx := context.Background()
	c := connect(t, namespace(t), "o1")
	head := "nul\x00byte é中🦀 quote'\"\\$accord$ "
	exact := head + strings.Repeat("x", 65536-len(head))
	seq := must(c.Publish(ctx, "bytes", exact))
	s := must(c.Subscribe(ctx, "bytes", &SubscribeOptions{Start: StartAfter, After: seq - 1}))
	defer s.Close()
	if ev := nextStreamEvent(t, s); ev.Payload != exact {
		t.Fatalf("65536 bytes came back as %d bytes", len(ev.Payload))
	}
	for name, payload := range map[string]string{"65537 bytes": exact + "x", "invalid UTF-8": "\xff"} {
		if _, err := c.Publish(ctx, "bytes", payload); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "payload") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := c.PublishMany(ctx, "bytes", []string{"ok", "\xc3\x28"}); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "payloads[1]") {
		t.Errorf("publish many with invalid UTF-8: %v", err)
	}
	seqs := must(c.PublishMany(ctx, "bytes", []string{"", "a\x00b", ""}))
	if len(seqs) != 3 || seqs[0] != seq+1 {
		t.Fatalf("seqs %v after %d", seqs, seq)
	}
	for i, p := range []string{"", "a\x00b", ""} {
		if ev := nextStreamEvent(t, s); ev.Seq != seqs[i] || ev.Payload != p {
			t.Fatalf("got %d %q", ev.Seq, ev.Payload)
		}
	}
	if seqs := must(c.PublishMany(ctx, "bytes", nil)); len(seqs) != 0 {
		t.Fatalf("nothing published: %v", seqs)
	}
}

func TestStreamBadInput(t *testing.T) {
	ctx := context.Background()
	c := connect(t, namespace(t), "o1")
	cases := map[string]struct {
		field string
		call  func() error
	}{
		"empty stream": {"stream", func() error { _, err := c.Publish(ctx, "", "x"); return err }},
		"long stream": {"stream", func() error {
			_, err := c.PublishMany(ctx, strings.Repeat("s", 513), []string{"x"})
			return err
		}},
		"stream with NUL": {"stream", func() error { _, err := c.StreamInfo(ctx, "a\x00b"); return err }},
		"consumer with NUL": {"consumer", func() error {
			_, err := c.Subscribe(ctx, "s", &SubscribeOptions{Consumer: "c\x00"})
			return err
		}},
		"long consumer": {"consumer", func() error {
			_, err := c.Subscribe(ctx, "s", &SubscribeOptions{Consumer: strings.Repeat("c", 513)})
			return err
		}},
		"page size 1001": {"PageSize", func() error {
			_, err := c.Subscribe(ctx, "s", &SubscribeOptions{PageSize: 1001})
			return err
		}},
		"negative page size": {"PageSize", func() error {
			_, err := c.Subscribe(ctx, "s", &SubscribeOptions{PageSize: -1})
			return err
		}},
		"negative after": {"after", func() error {
			_, err := c.Subscribe(ctx, "s", &SubscribeOptions{Start: StartAfter, After: -1})
			return err
		}},
		"unknown start": {"start", func() error {
			_, err := c.Subscribe(ctx, "s", &SubscribeOptions{Start: StreamStart(9)})
			return err
		}},
		"short max age": {"MaxAge", func() error {
			_, err := c.SetStreamRetention(ctx, "s", StreamRetention{MaxAge: 50 * time.Millisecond})
			return err
		}},
		"sub-ms max age": {"MaxAge", func() error {
			_, err := c.SetStreamRetention(ctx, "s", StreamRetention{MaxAge: time.Microsecond})
			return err
		}},
		"negative max len": {"MaxLen", func() error {
			_, err := c.SetStreamRetention(ctx, "s", StreamRetention{MaxLen: -1})
			return err
		}},
	}
	for name, tc := range cases {
		err := tc.call()
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalidArgument naming %s", name, err, tc.field)
		}
	}
}

// Close ends a Next waiting in another goroutine (nil, no error), and every later one; closing
// the client gives ErrClosed, to Next and to the Events channel's Err.
func TestStreamSubscriptionEnds(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	c := connect(t, ns, "o1")
	s := must(c.Subscribe(ctx, "s", &SubscribeOptions{}))
	type result struct {
		ev  *StreamEvent
		err error
	}
	done := make(chan result, 1)
	go func() {
		ev, err := s.Next(ctx)
		done <- result{ev, err}
	}()
	time.Sleep(100 * time.Millisecond)
	s.Close()
	select {
	case r := <-done:
		if r.ev != nil || r.err != nil {
			t.Fatalf("next ended by Close: %v %v", r.ev, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not end a waiting Next")
	}
	if ev, err := s.Next(ctx); ev != nil || err != nil {
		t.Fatalf("next after Close: %v %v", ev, err)
	}
	s.Close() // idempotent

	other := connect(t, ns, "o2")
	a := must(other.Subscribe(ctx, "s", &SubscribeOptions{}))
	b := must(other.Subscribe(ctx, "s", &SubscribeOptions{}))
	events := b.Events()
	other.Close()
	if _, err := a.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("next after the client closed: %v", err)
	}
	for range events {
	}
	if err := b.Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Err after the client closed: %v", err)
	}
	if _, err := other.Publish(ctx, "s", "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after the client closed: %v", err)
	}
}

// The embedded stores have streams too.
func TestStreamEmbeddedStore(t *testing.T) {
	ctx := context.Background()
	a := must(Connect(ctx, "memory:go-streams", nil))
	defer a.Close()
	b := must(Connect(ctx, "memory:go-streams", nil))
	defer b.Close()
	must(a.PublishMany(ctx, "events", []string{"e1", "e2"}))
	s := must(b.Subscribe(ctx, "events", &SubscribeOptions{Start: StartEarliest}))
	defer s.Close()
	expectStreamEvent(t, s, 1, "e1")
	expectStreamEvent(t, s, 2, "e2")
	must(a.Publish(ctx, "events", "e3"))
	expectStreamEvent(t, s, 3, "e3")
}
