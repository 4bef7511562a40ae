// Package accord is the Go binding of accord: locks, leases with fencing tokens, done-marking and
// notify/listen for worker fleets, coordinated through PostgreSQL. It calls the same Rust core
// as every other accord binding, through libaccord's C ABI, so Go workers share keys, fences and
// channels with Rust, Python, Node and C workers.
//
// Linking: by default the package links the static libaccord in lib/<GOOS>_<GOARCH>/ of the
// module, next to this file, so `go get` is all a user runs: no Rust toolchain. A released
// module carries it (and lib/include/accord.h) for linux/amd64; inside the accord repository
// `make test-go` puts the debug build there. On another platform, or to link an installed
// libaccord (the release tarball, or `make install PREFIX=…`), build with `-tags
// accord_pkgconfig`, which takes the flags from pkg-config.
//
// Every call's options are a pointer to a struct (ClientOptions, AcquireOptions, ClaimOptions,
// JoinOptions, FleetOptions, CampaignOptions, SubscribeOptions, ListQuery): nil means every
// default, and so does each field's zero value.
//
//	client, err := accord.Connect(ctx, "postgres://localhost/app", &accord.ClientOptions{Namespace: "reports"})
//	lease, err := client.Acquire(ctx, "daily", nil)
//	defer lease.Release(ctx)
//	select {
//	case <-lease.Lost(): // stop writing
//	case <-work(lease.Fence()):
//	}
//
// Work pools hand out keys without anyone walking their names: Offer puts keys under a prefix,
// Claim grants a batch of the free ones (each an ordinary *Lease), Counts says how many are
// free, held and done. A Semaphore admits at most its limit of holders of a name.
//
//	client.Offer(ctx, "task/", []string{"task/1", "task/2"}, nil)
//	leases, err := client.Claim(ctx, "task/", &accord.ClaimOptions{Limit: 10, Timeout: time.Second})
//
// AcquireOptions.Shared asks for a shared (reader) grant: many shared holders at once, or one
// exclusive holder. Waiting acquires are granted in arrival order. An Election picks one leader:
// Campaign waits in line, then leads (a *Leadership, fenced and renewed like a lease); Leader
// reads the leader, Observe follows the leaders.
//
//	election, err := client.Election("scheduler")
//	leadership, err := election.Campaign(ctx, "host-a:8080", nil)
//	defer leadership.Resign(ctx)
//
// Join makes this client a member of a group (Members lists them, Watch follows them). A Fleet
// splits shards among its members, handing them off as members come and go; its events are
// pulled with Next, which also acknowledges the previous one (a hand-off's shard is released
// when Next is called again, so checkpoint first):
//
//	fleet, err := client.Fleet(ctx, "orders", &accord.FleetOptions{Shards: 16})
//	for {
//		ev, err := fleet.Next(ctx) // ErrClosed once closed and drained
//		if err != nil {
//			break
//		}
//		if ev.Kind == accord.Assigned {
//			start(ev.Shard, ev.Fence) // pass the fence to what you write
//		} else {
//			stop(ev.Shard) // checkpoint; the next call hands the shard off
//		}
//	}
//
// A stopped container gets SIGTERM, which ends a Go program at once unless it is handled, and its
// leases and shards then wait for their ttl. The package installs no handler: cancel the
// program's context on the signal and close the client, which releases everything at once:
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	client, err := accord.Connect(ctx, url, nil)
//	defer client.Close() // runs when main returns: leases released, fleets handed back
//	work(ctx)            // returns once ctx is done (every wait takes ctx)
//
// Durable streams keep what notifications cannot: Publish appends an event and returns its seq
// (1, 2, 3, … per stream, in commit order); Subscribe delivers the stored events after its start,
// then the live ones, each once, in order, across reconnects. A named consumer Acks what it has
// done and a later subscription of the same name resumes after it:
//
//	seq, err := client.Publish(ctx, "orders", `{"id":42}`)
//	sub, err := client.Subscribe(ctx, "orders", &accord.SubscribeOptions{Start: accord.StartEarliest, Consumer: "billing"})
//	for ev := range sub.Events() {
//		handle(ev.Payload)
//		sub.Ack(ctx, ev.Seq)
//	}
//	err = sub.Err() // nil after Close; ErrTrimmed when retention deleted unread events
package accord

/*
#cgo !accord_pkgconfig CFLAGS: -I${SRCDIR}/../../include -I${SRCDIR}/lib/include
#cgo linux,amd64,!accord_pkgconfig LDFLAGS: ${SRCDIR}/lib/linux_amd64/libaccord.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
#cgo accord_pkgconfig pkg-config: accord
#include <stdlib.h>
#include "accord.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Version is the version of this module, which is that of the libaccord it links: every accord
// package carries the workspace's version (scripts/check-versions.sh), and the Go test checks
// this constant against the linked library's accord_version().
const Version = "0.1.0"

// libraryVersion is accord_version() of the linked libaccord.
func libraryVersion() string {
	return C.GoString(C.accord_version())
}

// ClientOptions of Connect. The zero value of each field means its default: namespace
// "default", owner host-pid-random, ttl 30 s, schema "accord", two command connections,
// connect and statement timeouts 10 s (or less, for the connection, when the context's
// deadline is sooner), migrations applied, statements prepared. Durations have millisecond
// resolution; negative ones are refused with ErrInvalidArgument.
type ClientOptions struct {
	Namespace string
	Owner     string
	TTL       time.Duration
	Schema    string
	PoolSize  int
	// ApplicationName is shown in pg_stat_activity.
	ApplicationName string
	// ListenURL is where the listening connection goes (PostgreSQL only; default: url): a
	// direct or session-pooled URL of the same database, when commands go through a PgBouncer
	// in transaction mode, where LISTEN cannot receive. Without it there, Listen fails with
	// ErrConnection naming listen_url. Refused (ErrInvalidArgument naming ListenURL) on the embedded store.
	ListenURL      string
	ConnectTimeout time.Duration
	// StatementTimeout bounds each statement: one that gets no answer in time breaks its
	// connection, and the call fails with ErrConnection. PostgreSQL only.
	StatementTimeout  time.Duration
	DisableMigrations bool
	// DisablePreparedStatements sends every statement with its text (still one round trip,
	// planned at every call) instead of preparing it once per connection (the default, the
	// core's prepare_statements = true; inverted: Go's zero value must be the default). Set it
	// behind a PgBouncer in transaction mode before 1.21 (or with max_prepared_statements = 0),
	// where a statement prepared on one server connection is missing on the next, and another
	// process's statement of the same name may be found there.
	DisablePreparedStatements bool
}

// Client is a connection to a coordinator. Its methods may be called from any goroutine.
type Client struct {
	ptr     *C.accord_client // freed when the Client is garbage, so that calls after Close get the core's answer
	owner   string
	ns      string
	lostMu  sync.Mutex
	lost    map[int64]chan struct{} // fence → Lost() channel of a live lease
	events  chan struct{}           // closed when the event loop ends
	closing sync.Once
}

// cstring copies s for libaccord. C strings end at the first NUL, so every string that may
// hold one is checked first by noNUL: it is refused rather than cut short.
func cstring(s string) *C.char { return C.CString(s) }

// noNUL refuses values holding a NUL byte, in the core's words for the same rule (a C string
// would silently end there: key "a\x00b" would become "a").
func noNUL(field string, values ...string) error {
	for _, v := range values {
		if strings.IndexByte(v, 0) >= 0 {
			return &Error{Kind: ErrInvalidArgument, Message: "invalid " + field + ": must not contain NUL characters"}
		}
	}
	return nil
}

func millis(d time.Duration) C.int64_t { return C.int64_t(d / time.Millisecond) }

// Connect opens a client on the coordinator at url (postgres://user:password@host:port/db?…).
// The context's deadline bounds the connection attempt.
func Connect(ctx context.Context, url string, opts *ClientOptions) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &ClientOptions{}
	}
	if err := noNUL("url", url); err != nil {
		return nil, err
	}
	for _, o := range []struct{ field, value string }{
		{"namespace", opts.Namespace}, {"owner", opts.Owner}, {"schema", opts.Schema},
		{"ApplicationName", opts.ApplicationName}, {"ListenURL", opts.ListenURL},
	} {
		if err := noNUL(o.field, o.value); err != nil {
			return nil, err
		}
	}
	o := C.accord_client_options_new()
	defer C.accord_client_options_free(o)
	var cerr *C.accord_error
	set := func(status C.accord_status) error { return takeError(status, cerr) }
	strs := []struct {
		value string
		apply func(*C.char) C.accord_status
	}{
		{opts.Namespace, func(s *C.char) C.accord_status { return C.accord_client_options_set_namespace(o, s, &cerr) }},
		{opts.Owner, func(s *C.char) C.accord_status { return C.accord_client_options_set_owner(o, s, &cerr) }},
		{opts.Schema, func(s *C.char) C.accord_status { return C.accord_client_options_set_schema(o, s, &cerr) }},
		{opts.ApplicationName, func(s *C.char) C.accord_status { return C.accord_client_options_set_application_name(o, s, &cerr) }},
		{opts.ListenURL, func(s *C.char) C.accord_status { return C.accord_client_options_set_listen_url(o, s, &cerr) }},
	}
	for _, s := range strs {
		if s.value == "" {
			continue
		}
		cs := cstring(s.value)
		err := set(s.apply(cs))
		C.free(unsafe.Pointer(cs))
		if err != nil {
			return nil, err
		}
	}
	if opts.TTL != 0 {
		if err := set(C.accord_client_options_set_ttl_ms(o, millis(opts.TTL), &cerr)); err != nil {
			return nil, err
		}
	}
	if opts.PoolSize != 0 {
		if err := set(C.accord_client_options_set_pool_size(o, C.uint32_t(opts.PoolSize), &cerr)); err != nil {
			return nil, err
		}
	}
	timeout := opts.ConnectTimeout
	if deadline, ok := ctx.Deadline(); ok && (timeout == 0 || time.Until(deadline) < timeout) {
		timeout = max(time.Until(deadline), time.Millisecond)
	}
	if timeout != 0 {
		if err := set(C.accord_client_options_set_connect_timeout_ms(o, millis(timeout), &cerr)); err != nil {
			return nil, err
		}
	}
	if opts.StatementTimeout != 0 {
		if err := set(C.accord_client_options_set_statement_timeout_ms(o, millis(opts.StatementTimeout), &cerr)); err != nil {
			return nil, err
		}
	}
	if opts.DisableMigrations {
		if err := set(C.accord_client_options_set_migrate(o, false, &cerr)); err != nil {
			return nil, err
		}
	}
	if opts.DisablePreparedStatements {
		if err := set(C.accord_client_options_set_prepare_statements(o, false, &cerr)); err != nil {
			return nil, err
		}
	}
	curl := cstring(url)
	defer C.free(unsafe.Pointer(curl))
	var ptr *C.accord_client
	if err := takeError(C.accord_client_connect(curl, o, &ptr, &cerr), cerr); err != nil {
		return nil, err
	}
	c := &Client{
		ptr:    ptr,
		owner:  C.GoString(C.accord_client_owner(ptr)),
		ns:     C.GoString(C.accord_client_namespace(ptr)),
		lost:   map[int64]chan struct{}{},
		events: make(chan struct{}),
	}
	runtime.SetFinalizer(c, (*Client).free)
	go c.eventLoop(ptr)
	if err := ctx.Err(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// eventLoop reads the client's events (leases lost) until the client closes: one goroutine per
// client, however many leases it holds.
func (c *Client) eventLoop(ptr *C.accord_client) {
	defer close(c.events)
	// The client closed: every lease it still had is over (released by the close).
	defer func() {
		c.lostMu.Lock()
		for fence, ch := range c.lost {
			close(ch)
			delete(c.lost, fence)
		}
		c.lostMu.Unlock()
	}()
	for {
		var ev C.accord_client_event
		if C.accord_client_next_event(ptr, -1, &ev, nil) != C.ACCORD_OK {
			return // closed
		}
		if ev.kind == C.ACCORD_CLIENT_EVENT_LEASE_LOST {
			c.lostMu.Lock()
			if ch, ok := c.lost[int64(ev.fence)]; ok {
				close(ch)
				delete(c.lost, int64(ev.fence))
			}
			c.lostMu.Unlock()
		}
	}
}

// Owner is the owner recorded on this client's leases.
func (c *Client) Owner() string { return c.owner }

// Namespace is the namespace of this client's keys.
func (c *Client) Namespace() string { return c.ns }

// use runs f with the client's handle, which stays valid until the Client is garbage: after
// Close, every call is answered by the core (ErrClosed).
func (c *Client) use(f func(*C.accord_client) error) error {
	defer runtime.KeepAlive(c) // the finalizer must not free the handle while f uses it
	return f(c.ptr)
}

// AcquireOptions of Acquire and TryAcquire; nil means the client's ttl, no metadata, an
// exclusive grant, and (for Acquire) waiting as long as the context allows.
type AcquireOptions struct {
	TTL      time.Duration
	Timeout  time.Duration
	Metadata map[string]any
	// Shared asks for a shared grant: any number of shared holders of a key at once, or one
	// exclusive holder. Once an exclusive acquire waits, new shared acquires wait behind it. A
	// shared lease renews, but cannot change the key's metadata or be marked done
	// (ErrInvalidArgument).
	Shared bool
}

func acquireOptions(opts *AcquireOptions, deadline time.Time, hasDeadline bool) (*C.accord_acquire_options, error) {
	o := C.accord_acquire_options_new()
	var cerr *C.accord_error
	fail := func(status C.accord_status) error {
		if err := takeError(status, cerr); err != nil {
			C.accord_acquire_options_free(o)
			return err
		}
		return nil
	}
	if opts == nil {
		opts = &AcquireOptions{}
	}
	if opts.TTL != 0 {
		if err := fail(C.accord_acquire_options_set_ttl_ms(o, millis(opts.TTL), &cerr)); err != nil {
			return nil, err
		}
	}
	if err := fail(C.accord_acquire_options_set_timeout_ms(o, waitTimeout(opts.Timeout, deadline, hasDeadline), &cerr)); err != nil {
		return nil, err
	}
	if opts.Shared {
		if err := fail(C.accord_acquire_options_set_shared(o, true, &cerr)); err != nil {
			return nil, err
		}
	}
	if opts.Metadata != nil {
		text, err := json.Marshal(opts.Metadata)
		if err != nil {
			C.accord_acquire_options_free(o)
			return nil, &Error{Kind: ErrInvalidArgument, Message: "invalid metadata: " + err.Error()}
		}
		cs := cstring(string(text))
		defer C.free(unsafe.Pointer(cs))
		if err := fail(C.accord_acquire_options_set_metadata_json(o, cs, &cerr)); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Acquire waits until key is granted and returns its lease. Cancelling ctx (or its deadline
// passing) ends the wait with an error matching both ErrCancelled/ErrTimeout and the context's
// error; nothing is left held. A done key gives ErrDone.
func (c *Client) Acquire(ctx context.Context, key string, opts *AcquireOptions) (*Lease, error) {
	if err := noNUL("key", key); err != nil {
		return nil, err
	}
	ckey := cstring(key)
	defer C.free(unsafe.Pointer(ckey))
	return c.wait(ctx, opts, func(o *C.accord_acquire_options, out **C.accord_lease, cerr **C.accord_error) C.accord_status {
		var status C.accord_status
		c.use(func(cp *C.accord_client) error {
			status = C.accord_client_acquire(cp, ckey, o, out, cerr)
			return nil
		})
		return status
	})
}

// wait runs a waiting acquire (call, of the client or of a semaphore) with opts, bounded by
// ctx's deadline and ended by ctx's cancellation; the lease is the client's.
func (c *Client) wait(ctx context.Context, opts *AcquireOptions, call func(*C.accord_acquire_options, **C.accord_lease, **C.accord_error) C.accord_status) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	deadline, hasDeadline := ctx.Deadline()
	o, err := acquireOptions(opts, deadline, hasDeadline)
	if err != nil {
		return nil, err
	}
	defer C.accord_acquire_options_free(o)
	token := C.accord_cancel_token_new()
	var cerr *C.accord_error
	C.accord_acquire_options_set_cancel_token(o, token, nil)
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		C.accord_cancel_token_cancel(token)
		close(cancelled)
	})
	var ptr *C.accord_lease
	err = takeError(call(o, &ptr, &cerr), cerr)
	if !stop() {
		<-cancelled // the canceller may still be using the token
	}
	C.accord_cancel_token_free(token)
	if err != nil {
		var own time.Duration
		if opts != nil {
			own = opts.Timeout
		}
		return nil, waitError(ctx, err, own, deadline, hasDeadline)
	}
	return c.adopt(ptr), nil
}

// waitTimeout is the C timeout (ms; -1: without limit) of a wait with its own timeout `own`
// (none when not positive), bounded by ctx's deadline.
func waitTimeout(own time.Duration, deadline time.Time, hasDeadline bool) C.int64_t {
	timeout := C.int64_t(-1)
	if own > 0 {
		timeout = millis(own)
	}
	if hasDeadline {
		if left := millis(time.Until(deadline)); timeout < 0 || left < timeout {
			timeout = max(left, 0)
		}
	}
	return timeout
}

// waitError is the error of a wait bounded as waitTimeout says: an error caused by ctx also
// matches the context's error.
func waitError(ctx context.Context, err error, own time.Duration, deadline time.Time, hasDeadline bool) error {
	// The wait may have been bounded by ctx's deadline a moment before ctx noticed.
	bound := hasDeadline && (own <= 0 || time.Until(deadline) < own)
	if bound && errors.Is(err, ErrTimeout) && ctx.Err() == nil {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return withContext(ctx, err)
}

// TryAcquire tries once: the lease if key is free, an error matching ErrHeld if it is held (by
// anyone, this client included), ErrDone if it is done.
func (c *Client) TryAcquire(ctx context.Context, key string, opts *AcquireOptions) (*Lease, error) {
	if err := noNUL("key", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := acquireOptions(opts, time.Time{}, false)
	if err != nil {
		return nil, err
	}
	defer C.accord_acquire_options_free(o)
	ckey := cstring(key)
	defer C.free(unsafe.Pointer(ckey))
	var ptr *C.accord_lease
	var cerr *C.accord_error
	err = c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_try_acquire(cp, ckey, o, &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	return c.adopt(ptr), nil
}

// Reset makes a done (or free) key unknown again, so it can be acquired; it reports whether
// there was anything to reset. A key held by a live lease gives ErrHeld.
func (c *Client) Reset(ctx context.Context, key string) (bool, error) {
	if err := noNUL("key", key); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ckey := cstring(key)
	defer C.free(unsafe.Pointer(ckey))
	var existed C.bool
	var cerr *C.accord_error
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_reset(cp, ckey, &existed, &cerr), cerr)
	})
	return bool(existed), err
}

// Notify sends payload on channel to every listener, in any language, and to SQL LISTENers.
func (c *Client) Notify(ctx context.Context, channel, payload string) error {
	if err := noNUL("channel", channel); err != nil {
		return err
	}
	if err := noNUL("payload", payload); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cch, cpayload := cstring(channel), cstring(payload)
	defer C.free(unsafe.Pointer(cch))
	defer C.free(unsafe.Pointer(cpayload))
	var cerr *C.accord_error
	return c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_notify(cp, cch, cpayload, &cerr), cerr)
	})
}

// HeldCount is how many leases this client holds and keeps alive now.
func (c *Client) HeldCount() int {
	defer runtime.KeepAlive(c)
	return int(C.accord_client_held_count(c.ptr))
}

// WaiterWakeups is how many times this client's waiting acquires were woken by another
// client's release (each release wakes the head of its key's line only). A diagnostic, for
// tests.
func (c *Client) WaiterWakeups() uint64 {
	defer runtime.KeepAlive(c)
	return uint64(C.accord_client_waiter_wakeups(c.ptr))
}

// QueuedCount is how many of this client's waiting acquires (and campaigns) hold a place in a
// key's line now. A diagnostic: tests wait for it to order waiters without sleeping.
func (c *Client) QueuedCount() int {
	defer runtime.KeepAlive(c)
	return int(C.accord_client_queued_count(c.ptr))
}

// Close releases the client's leases (their Lost channels close), ends waiting acquires and
// subscriptions with ErrClosed, and closes the connections. Afterwards every call of the
// client, and Renew, Release and Done of any of its leases, give ErrClosed. Idempotent.
func (c *Client) Close() error {
	c.closing.Do(func() {
		C.accord_client_close(c.ptr) // wakes every blocked call
		<-c.events
	})
	runtime.KeepAlive(c)
	return nil
}

// free gives the handle back to libaccord once nothing can use it (the Client is garbage). A
// client that was never closed is still reachable from its event loop, so it is not freed.
func (c *Client) free() {
	C.accord_client_free(c.ptr)
	c.ptr = nil
}
