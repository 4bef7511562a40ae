package accord

// #include <stdlib.h>
// #include "accord.h"
import "C"

import (
	"context"
	"sync"
	"unsafe"
)

// EventKind says what an Event is.
type EventKind int

const (
	// Message is a notification: Channel and Payload are set.
	Message EventKind = C.ACCORD_EVENT_MESSAGE
	// Reconnected says the listening connection was re-established: notifications sent
	// meanwhile were missed; re-read whatever state they were about.
	Reconnected EventKind = C.ACCORD_EVENT_RECONNECTED
)

// Event is what a Subscription delivers.
type Event struct {
	Kind    EventKind
	Channel string
	Payload string
}

// Subscription receives notifications on its channels, in the order the coordinator delivered
// them, on the channel Events returns.
type Subscription struct {
	ptr     *C.accord_subscription
	events  chan Event
	stop    chan struct{}
	ended   chan struct{}
	err     error
	closing sync.Once
}

// Listen starts receiving notifications on channels. It returns once every notification sent
// from then on will be delivered.
func (c *Client) Listen(ctx context.Context, channels ...string) (*Subscription, error) {
	if err := noNUL("channel", channels...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names := make([]*C.char, len(channels))
	for i, ch := range channels {
		names[i] = cstring(ch)
		defer C.free(unsafe.Pointer(names[i]))
	}
	// The array of pointers lives in C memory: cgo forbids passing Go memory holding pointers.
	array := (**C.char)(C.malloc(C.size_t(len(names)+1) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(array))
	copy(unsafe.Slice(array, len(names)), names)
	var ptr *C.accord_subscription
	var cerr *C.accord_error
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_listen(cp, array, C.size_t(len(names)), &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	s := &Subscription{ptr: ptr, events: make(chan Event, 64), stop: make(chan struct{}), ended: make(chan struct{})}
	go s.read()
	return s, nil
}

// read moves events from C to the Go channel until the subscription or its client closes.
func (s *Subscription) read() {
	// Deferred calls run last-first: ended closes before events, so a reader that saw events
	// close and then calls Err gets the reason, never the nil of a subscription still open.
	defer close(s.events)
	defer close(s.ended)
	for {
		var ev *C.accord_event
		var cerr *C.accord_error
		err := takeError(C.accord_subscription_next(s.ptr, -1, &ev, &cerr), cerr)
		if err != nil {
			if !isClosedBySubscription(s) {
				s.err = err
			}
			return
		}
		e := Event{Kind: EventKind(ev.kind)}
		if ev.channel != nil {
			e.Channel = C.GoString(ev.channel)
			e.Payload = C.GoString(ev.payload)
		}
		C.accord_event_free(ev)
		select {
		case s.events <- e:
		case <-s.stop:
			return
		}
	}
}

func isClosedBySubscription(s *Subscription) bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Events delivers the subscription's events. It is closed when the subscription ends: after
// Close, or when the client closes (then Err reports ErrClosed).
func (s *Subscription) Events() <-chan Event { return s.events }

// Err says why Events was closed: nil after Close, an error matching ErrClosed when the
// client was closed.
func (s *Subscription) Err() error {
	select {
	case <-s.ended:
		return s.err
	default:
		return nil
	}
}

// Close stops delivery and gives back the subscription's LISTENs. Idempotent.
func (s *Subscription) Close() error {
	s.closing.Do(func() {
		close(s.stop)
		C.accord_subscription_close(s.ptr)
		<-s.ended
		C.accord_subscription_free(s.ptr)
		s.ptr = nil
	})
	return nil
}
