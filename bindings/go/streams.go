package accord

// #include <stdlib.h>
// #include <string.h>
// #include "accord.h"
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Durable streams: Publish appends an event to a stream and returns its seq (1, 2, 3, … per
// stream, in commit order); a StreamSubscription delivers the stored events after its start,
// then the live ones, in seq order, each once, across reconnects. A named consumer stores its
// position with Ack and resumes after it in any process and language. Retention by length and
// by age deletes the oldest events; reading deleted ones gives ErrTrimmed.

// StreamEvent is one event of a stream.
type StreamEvent struct {
	Stream  string // the stream it was published to
	Seq     int64  // 1 for the stream's first event, one more for each after it
	Payload string // what the publisher sent: any UTF-8 (NUL included), up to 64 KiB
	// PublishedAt is when it was stored (the coordinator's clock, ms resolution); never earlier
	// than the event before it.
	PublishedAt time.Time
}

// StreamStart says where a subscription starts.
type StreamStart int

const (
	// StartLatest starts with the next event published (or, for a named consumer with a stored
	// position, after that position). The default.
	StartLatest StreamStart = iota
	// StartEarliest starts with the oldest event the stream still holds (or, for a named
	// consumer with a stored position, after that position).
	StartEarliest
	// StartAfter starts with the event after SubscribeOptions.After (0: the first event ever),
	// whatever a named consumer's stored position (a seek).
	StartAfter
)

// SubscribeOptions of Subscribe. nil (or the zero value) starts with the next event published,
// without a consumer, reading 100 events per statement.
type SubscribeOptions struct {
	Start StreamStart
	// After is the seq StartAfter starts after (not used by the other starts).
	After int64
	// Consumer names a consumer: Ack stores its position, and a later subscription of the same
	// name resumes after it.
	Consumer string
	// PageSize: events read per statement (1..1000; 0: 100).
	PageSize int
}

// StreamRetention says how long a stream keeps its events; the zero value keeps every event.
// Both bounds may be set: an event goes when either says so. SetStreamRetention takes it by
// value: it is the rule to store, a required argument (its zero value a rule too), not options
// with defaults.
type StreamRetention struct {
	// MaxLen keeps at most this many of the newest events (0: no bound).
	MaxLen int64
	// MaxAge keeps events at most this old (0: no bound; else at least 100 ms, ms resolution).
	MaxAge time.Duration
}

// StreamInfo is a stream's bounds and retention.
type StreamInfo struct {
	Stream string
	// FirstSeq is the oldest seq still stored; LastSeq+1 when none is.
	FirstSeq int64
	// LastSeq is the newest seq published (0: nothing ever was).
	LastSeq   int64
	Retention StreamRetention
}

// nameArg is a stream or consumer name for libaccord. C strings end at the first NUL, so a
// name holding one cannot reach libaccord whole: it is refused here, in the core's words for
// the same rule, rather than cut short.
func nameArg(field, s string) (*C.char, error) {
	if err := noNUL(field, s); err != nil {
		return nil, err
	}
	return cstring(s), nil
}

// payloadArg is a Go string as a pointer + length for libaccord, which copies it during the
// call (a string's bytes hold no Go pointer, so cgo lets C read them).
func payloadArg(s string) (*C.char, C.size_t) {
	if s == "" {
		return nil, 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// Publish appends payload (any UTF-8, NUL included, up to 64 KiB) to stream and returns its seq.
// An error matching ErrConnection may come after the event was stored (it is not retried, which
// could store it twice). Concurrent publishes of one client share statements.
func (c *Client) Publish(ctx context.Context, stream, payload string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cstream, err := nameArg("stream", stream)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cstream))
	ptr, n := payloadArg(payload)
	var seq C.int64_t
	var cerr *C.accord_error
	err = c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_publish(cp, cstream, ptr, n, &seq, &cerr), cerr)
	})
	if err != nil {
		return 0, err
	}
	return int64(seq), nil
}

// PublishMany appends payloads to stream in this order (at most 10,000 per call) and returns
// their seqs, increasing. Nothing is stored when a payload is refused.
func (c *Client) PublishMany(ctx context.Context, stream string, payloads []string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cstream, err := nameArg("stream", stream)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cstream))
	n := len(payloads)
	// The payloads are copied into one C buffer: cgo forbids handing C an array of Go pointers.
	total := 1
	for _, p := range payloads {
		total += len(p)
	}
	buf := (*C.char)(C.malloc(C.size_t(total)))
	defer C.free(unsafe.Pointer(buf))
	ptrs := make([]*C.char, n)
	lens := make([]C.size_t, n)
	seqs := make([]C.int64_t, n)
	offset := 0
	for i, p := range payloads {
		ptrs[i] = (*C.char)(unsafe.Add(unsafe.Pointer(buf), offset))
		lens[i] = C.size_t(len(p))
		if len(p) > 0 {
			C.memcpy(unsafe.Pointer(ptrs[i]), unsafe.Pointer(unsafe.StringData(p)), C.size_t(len(p)))
		}
		offset += len(p)
	}
	var ptrsArg **C.char
	var lensArg *C.size_t
	var seqsArg *C.int64_t
	if n > 0 {
		ptrsArg, lensArg, seqsArg = &ptrs[0], &lens[0], &seqs[0]
	}
	var cerr *C.accord_error
	err = c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_publish_many(cp, cstream, ptrsArg, lensArg, C.size_t(n), seqsArg, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	for i, s := range seqs {
		out[i] = int64(s)
	}
	return out, nil
}

// subscribeOptions builds libaccord's options (freed by the caller).
func subscribeOptions(opts *SubscribeOptions) (o *C.accord_subscribe_options, err error) {
	if opts == nil {
		opts = &SubscribeOptions{}
	}
	o = C.accord_subscribe_options_new()
	defer func() {
		if err != nil {
			C.accord_subscribe_options_free(o)
		}
	}()
	var cerr *C.accord_error
	switch opts.Start {
	case StartLatest:
		err = takeError(C.accord_subscribe_options_set_start_latest(o, &cerr), cerr)
	case StartEarliest:
		err = takeError(C.accord_subscribe_options_set_start_earliest(o, &cerr), cerr)
	case StartAfter:
		err = takeError(C.accord_subscribe_options_set_start_after(o, C.int64_t(opts.After), &cerr), cerr)
	default:
		err = &Error{Kind: ErrInvalidArgument, Message: fmt.Sprintf("invalid start: %d is not a StreamStart", int(opts.Start))}
	}
	if err != nil {
		return nil, err
	}
	if opts.Consumer != "" {
		consumer, err := nameArg("consumer", opts.Consumer)
		if err != nil {
			return nil, err
		}
		defer C.free(unsafe.Pointer(consumer))
		if err := takeError(C.accord_subscribe_options_set_consumer(o, consumer, &cerr), cerr); err != nil {
			return nil, err
		}
	}
	if opts.PageSize != 0 {
		if err := takeError(C.accord_subscribe_options_set_page_size(o, C.int64_t(opts.PageSize), &cerr), cerr); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// StreamSubscription delivers the events of one stream: the stored ones after its start, then
// the live ones, in seq order, each once. Read it with Next, or with Events and Err (not both).
// Close may be called from any goroutine; a subscription that becomes unreachable without a
// Close is closed when the garbage collector finds it.
type StreamSubscription struct {
	ptr      *C.accord_stream_subscription // freed when the StreamSubscription is garbage
	stream   string
	consumer string
	stop     chan struct{}
	closing  sync.Once
	mu       sync.Mutex       // guards events and ended
	events   chan StreamEvent // nil until Events is called
	ended    chan struct{}    // closed when the Events goroutine ends
	err      error            // why it ended; read after ended is closed
}

// Subscribe subscribes to stream. It returns once every event published from then on will be
// delivered. An error matching ErrTrimmed says the start asked for was deleted by the stream's
// retention (the message names the seq the stream starts at now).
func (c *Client) Subscribe(ctx context.Context, stream string, opts *SubscribeOptions) (*StreamSubscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cstream, err := nameArg("stream", stream)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cstream))
	o, err := subscribeOptions(opts)
	if err != nil {
		return nil, err
	}
	defer C.accord_subscribe_options_free(o)
	var ptr *C.accord_stream_subscription
	var cerr *C.accord_error
	err = c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_subscribe(cp, cstream, o, &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	s := &StreamSubscription{
		ptr:    ptr,
		stream: C.GoString(C.accord_stream_subscription_stream(ptr)),
		stop:   make(chan struct{}),
	}
	if consumer := C.accord_stream_subscription_consumer(ptr); consumer != nil {
		s.consumer = C.GoString(consumer)
	}
	runtime.SetFinalizer(s, (*StreamSubscription).free)
	return s, nil
}

// Stream is the stream the subscription reads.
func (s *StreamSubscription) Stream() string { return s.stream }

// Consumer is the subscription's named consumer ("" without one).
func (s *StreamSubscription) Consumer() string { return s.consumer }

func streamEventOf(ev *C.accord_stream_event) StreamEvent {
	return StreamEvent{
		Stream:      C.GoString(ev.stream),
		Seq:         int64(ev.seq),
		Payload:     C.GoStringN(ev.payload, C.int(ev.payload_len)),
		PublishedAt: time.UnixMilli(int64(ev.published_at_ms)),
	}
}

// Next waits for the next event, as long as ctx allows (its end gives an error matching both
// ErrCancelled and the context's error; no event is lost by it). It returns nil and no error
// once the subscription has ended: after Close, or after an error matching ErrTrimmed (retention
// deleted events it had not read yet; the message names the seq the stream starts at now). Once
// the client is closed it gives an error matching ErrClosed. Meant for one goroutine at a time.
func (s *StreamSubscription) Next(ctx context.Context) (*StreamEvent, error) {
	defer runtime.KeepAlive(s)
	var ev *C.accord_stream_event
	err := cancellable(ctx, func(token *C.accord_cancel_token, cerr **C.accord_error) C.accord_status {
		return C.accord_stream_subscription_next(s.ptr, -1, token, &ev, cerr)
	})
	if err != nil || ev == nil {
		return nil, err
	}
	defer C.accord_stream_event_free(ev)
	event := streamEventOf(ev)
	return &event, nil
}

// Events delivers the subscription's events on a channel, read in a goroutine of its own
// (started by the first call). The channel is closed when the subscription ends: after Close
// (Err is nil), or after an error (Err says which: ErrTrimmed, ErrClosed once the client is
// closed).
func (s *StreamSubscription) Events() <-chan StreamEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events == nil {
		s.events = make(chan StreamEvent, 64)
		s.ended = make(chan struct{})
		go s.read()
	}
	return s.events
}

// eventsEnded is the channel closed when the Events goroutine ends (nil: never started).
func (s *StreamSubscription) eventsEnded() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

func (s *StreamSubscription) read() {
	// Deferred calls run last-first: ended closes before events, so a reader that saw events
	// close and then calls Err gets the reason, never the nil of a subscription still open.
	defer close(s.events)
	defer close(s.ended)
	for {
		ev, err := s.Next(context.Background())
		if err != nil {
			s.err = err
			return
		}
		if ev == nil {
			return
		}
		select {
		case s.events <- *ev:
		case <-s.stop:
			return
		}
	}
}

// Err says why the Events channel was closed: nil after Close (or while it is open), the error
// that ended the subscription otherwise.
func (s *StreamSubscription) Err() error {
	ended := s.eventsEnded()
	if ended == nil {
		return nil
	}
	select {
	case <-ended:
		return s.err
	default:
		return nil
	}
}

// Ack stores the named consumer's position: a later subscription of the consumer starts after
// seq. Positions only move forward (acking an older seq changes nothing). seq must have been
// delivered by this subscription (else ErrInvalidArgument naming "seq"); a subscription without a
// consumer gives ErrInvalidArgument naming "consumer".
func (s *StreamSubscription) Ack(ctx context.Context, seq int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	var cerr *C.accord_error
	return takeError(C.accord_stream_subscription_ack(s.ptr, C.int64_t(seq), &cerr), cerr)
}

// Position is the seq of the last event delivered (before the first: where the subscription
// started).
func (s *StreamSubscription) Position() int64 {
	defer runtime.KeepAlive(s)
	return int64(C.accord_stream_subscription_position(s.ptr))
}

// Close stops reading and listening: a Next waiting returns nil, and so does every later one;
// the Events channel closes. Idempotent.
func (s *StreamSubscription) Close() error {
	s.closing.Do(func() {
		close(s.stop)
		C.accord_stream_subscription_close(s.ptr)
		if ended := s.eventsEnded(); ended != nil {
			<-ended
		}
	})
	runtime.KeepAlive(s)
	return nil
}

func (s *StreamSubscription) free() {
	C.accord_stream_subscription_free(s.ptr) // closes it if needed
	s.ptr = nil
}

// StreamInfo reads stream's bounds and retention (a stream never published: FirstSeq 1,
// LastSeq 0).
func (c *Client) StreamInfo(ctx context.Context, stream string) (StreamInfo, error) {
	if err := ctx.Err(); err != nil {
		return StreamInfo{}, err
	}
	cstream, err := nameArg("stream", stream)
	if err != nil {
		return StreamInfo{}, err
	}
	defer C.free(unsafe.Pointer(cstream))
	var info *C.accord_stream_info
	var cerr *C.accord_error
	err = c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_stream_info(cp, cstream, &info, &cerr), cerr)
	})
	if err != nil {
		return StreamInfo{}, err
	}
	defer C.accord_stream_info_free(info)
	return StreamInfo{
		Stream:   C.GoString(info.stream),
		FirstSeq: int64(info.first_seq),
		LastSeq:  int64(info.last_seq),
		Retention: StreamRetention{
			MaxLen: int64(info.max_len),
			MaxAge: time.Duration(info.max_age_ms) * time.Millisecond,
		},
	}, nil
}

// SetStreamRetention sets how long stream keeps its events, replacing its rule (the zero
// StreamRetention keeps every event), and trims it now: it returns how many events that
// deleted. Later trims run in the background of publishing clients. MaxLen below 0 and MaxAge
// below 100 ms are refused with ErrInvalidArgument naming "max_len" or "max_age".
func (c *Client) SetStreamRetention(ctx context.Context, stream string, retention StreamRetention) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cstream, err := nameArg("stream", stream)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cstream))
	maxAge := millis(retention.MaxAge)
	if retention.MaxAge > 0 && maxAge == 0 {
		maxAge = 1 // under a millisecond is a bound too (which libaccord refuses), not "none"
	}
	var trimmed C.uint64_t
	var cerr *C.accord_error
	err = c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_set_stream_retention(cp, cstream, C.int64_t(retention.MaxLen), maxAge, &trimmed, &cerr), cerr)
	})
	if err != nil {
		return 0, err
	}
	return int64(trimmed), nil
}
