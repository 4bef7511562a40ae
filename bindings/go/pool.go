package accord

// #include <stdlib.h>
// #include "accord.h"
import "C"

import (
	"context"
	"runtime"
	"time"
	"unsafe"
)

// Work pools and semaphores: docs/semantics.md, "Work pools and semaphores".

// ClaimOptions of Claim; nil means one key, the client's ttl, no metadata, no waiting.
type ClaimOptions struct {
	// Limit is the most keys one claim grants (0: 1; 1..1000).
	Limit int
	// TTL of the claimed leases (0: the client's).
	TTL time.Duration
	// Timeout: when nothing is claimable, wait up to this long for a release, an offer or an
	// expiry in the pool (0: answer at once; negative: until the context ends). The context's
	// deadline bounds the wait too. An empty answer after the wait is not an error.
	Timeout time.Duration
	// Metadata merged into each claimed key's metadata.
	Metadata map[string]any
}

// PoolCounts is how many keys of a work pool are in each state, by the coordinator's clock.
type PoolCounts struct {
	Free uint64 // claimable now: never granted, released, or expired
	Held uint64 // held by a live lease
	Done uint64 // marked done
}

// Total is every key of the pool.
func (p PoolCounts) Total() uint64 { return p.Free + p.Held + p.Done }

// Offer makes keys claimable in the work pool prefix; each key must start with the prefix (and
// be longer), at most 5000 per call. Idempotent: a key already in a pool, held or done, stays
// as it is; a key acquired before without an offer joins the pool as it is. metadata (may be
// nil) is the metadata of keys new to the coordinator. It returns how many keys joined the
// pool, and wakes waiting claimers.
func (c *Client) Offer(ctx context.Context, prefix string, keys []string, metadata map[string]any) (int, error) {
	if err := noNUL("prefix", prefix); err != nil {
		return 0, err
	}
	if err := noNUL("keys", keys...); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cm, err := metadataJSON(metadata)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cm))
	cprefix := cstring(prefix)
	defer C.free(unsafe.Pointer(cprefix))
	var ckeys **C.char
	if len(keys) > 0 {
		// A C array: cgo may not pass Go memory holding C pointers.
		ckeys = (**C.char)(C.malloc(C.size_t(len(keys)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		defer C.free(unsafe.Pointer(ckeys))
		arr := unsafe.Slice(ckeys, len(keys))
		for i, k := range keys {
			arr[i] = cstring(k)
		}
		defer func() {
			for _, p := range arr {
				C.free(unsafe.Pointer(p))
			}
		}()
	}
	var joined C.uint64_t
	var cerr *C.accord_error
	err = c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_offer(cp, cprefix, ckeys, C.size_t(len(keys)), cm, &joined, &cerr), cerr)
	})
	return int(joined), err
}

// Claim grants up to opts.Limit free keys of the work pool prefix, oldest offer first, in one
// statement; concurrent claimers never wait for each other and never get the same key. When
// nothing is claimable it returns no leases and no error (after opts.Timeout, if one is set).
// Cancelling ctx ends a wait with an error matching both ErrCancelled and context.Canceled; a
// wait cut short by ctx's deadline gives an error matching context.DeadlineExceeded. Nothing is
// left held either way.
func (c *Client) Claim(ctx context.Context, prefix string, opts *ClaimOptions) ([]*Lease, error) {
	if err := noNUL("prefix", prefix); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &ClaimOptions{}
	}
	o := C.accord_claim_options_new()
	defer C.accord_claim_options_free(o)
	var cerr *C.accord_error
	if opts.Limit != 0 {
		if err := takeError(C.accord_claim_options_set_limit(o, C.int64_t(opts.Limit), &cerr), cerr); err != nil {
			return nil, err
		}
	}
	if opts.TTL != 0 {
		if err := takeError(C.accord_claim_options_set_ttl_ms(o, millis(opts.TTL), &cerr), cerr); err != nil {
			return nil, err
		}
	}
	// The wait: opts.Timeout, bounded by the context's deadline (the context's end is
	// reported as such, not as an empty claim).
	bounded := false // by the context's deadline
	if opts.Timeout != 0 {
		timeout := C.int64_t(-1)
		if opts.Timeout > 0 {
			timeout = millis(opts.Timeout)
		}
		if deadline, ok := ctx.Deadline(); ok {
			if left := millis(time.Until(deadline)); timeout < 0 || left < timeout {
				timeout, bounded = max(left, 0), true
			}
		}
		if err := takeError(C.accord_claim_options_set_timeout_ms(o, timeout, &cerr), cerr); err != nil {
			return nil, err
		}
	}
	if opts.Metadata != nil {
		cm, err := metadataJSON(opts.Metadata)
		if err != nil {
			return nil, err
		}
		err = takeError(C.accord_claim_options_set_metadata_json(o, cm, &cerr), cerr)
		C.free(unsafe.Pointer(cm))
		if err != nil {
			return nil, err
		}
	}
	token := C.accord_cancel_token_new()
	C.accord_claim_options_set_cancel_token(o, token, nil)
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		C.accord_cancel_token_cancel(token)
		close(cancelled)
	})
	cprefix := cstring(prefix)
	defer C.free(unsafe.Pointer(cprefix))
	var arr **C.accord_lease
	var n C.size_t
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_claim(cp, cprefix, o, &arr, &n, &cerr), cerr)
	})
	if !stop() {
		<-cancelled // the canceller may still be using the token
	}
	C.accord_cancel_token_free(token)
	if err != nil {
		return nil, withContext(ctx, err)
	}
	leases := make([]*Lease, 0, int(n))
	if n > 0 {
		for _, ptr := range unsafe.Slice(arr, int(n)) {
			leases = append(leases, c.adopt(ptr))
		}
		C.accord_lease_array_free(arr, n)
	}
	// A wait cut short by the context's deadline is the context's end, not an empty claim (the
	// core's wait may end a moment before the context notices).
	if len(leases) == 0 && (bounded || opts.Timeout != 0 && ctx.Err() != nil) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, context.DeadlineExceeded
	}
	return leases, nil
}

// Counts says how many keys of the work pool prefix are free, held and done.
func (c *Client) Counts(ctx context.Context, prefix string) (PoolCounts, error) {
	if err := noNUL("prefix", prefix); err != nil {
		return PoolCounts{}, err
	}
	if err := ctx.Err(); err != nil {
		return PoolCounts{}, err
	}
	cprefix := cstring(prefix)
	defer C.free(unsafe.Pointer(cprefix))
	var out C.accord_pool_counts
	var cerr *C.accord_error
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_counts(cp, cprefix, &out, &cerr), cerr)
	})
	if err != nil {
		return PoolCounts{}, err
	}
	return PoolCounts{Free: uint64(out.free), Held: uint64(out.held), Done: uint64(out.done)}, nil
}

// Semaphore admits at most Limit() live holders of its name at once, each with an ordinary
// *Lease on one of its permit keys (`<name>#00000` …). Open it with Client.Semaphore; its
// methods may be called from any goroutine.
type Semaphore struct {
	client *Client
	ptr    *C.accord_semaphore // freed when the Semaphore is garbage
	name   string
	limit  int
}

// Semaphore opens the semaphore name with limit permits (1..10000), offering the permits it
// needs. A handle opened with a smaller limit than another never takes a permit at or above
// its own limit: open every handle of a name with the same limit.
func (c *Client) Semaphore(ctx context.Context, name string, limit int) (*Semaphore, error) {
	if err := noNUL("name", name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cname := cstring(name)
	defer C.free(unsafe.Pointer(cname))
	var ptr *C.accord_semaphore
	var cerr *C.accord_error
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_semaphore(cp, cname, C.int64_t(limit), &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	s := &Semaphore{
		client: c,
		ptr:    ptr,
		name:   C.GoString(C.accord_semaphore_name(ptr)),
		limit:  int(C.accord_semaphore_limit(ptr)),
	}
	runtime.SetFinalizer(s, (*Semaphore).free)
	return s, nil
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit is the number of permits this handle takes from.
func (s *Semaphore) Limit() int { return s.limit }

func (s *Semaphore) use(f func(*C.accord_semaphore) error) error {
	defer runtime.KeepAlive(s) // the finalizer must not free the handle while f uses it
	return f(s.ptr)
}

// Acquire waits for a permit and returns its lease: up to opts.Timeout (then ErrTimeout; 0:
// without limit) and as long as the context allows (its end gives an error matching both
// ErrCancelled/ErrTimeout and the context's error); nothing is left held.
func (s *Semaphore) Acquire(ctx context.Context, opts *AcquireOptions) (*Lease, error) {
	return s.client.wait(ctx, opts, func(o *C.accord_acquire_options, out **C.accord_lease, cerr **C.accord_error) C.accord_status {
		var status C.accord_status
		s.use(func(sp *C.accord_semaphore) error {
			status = C.accord_semaphore_acquire(sp, o, out, cerr)
			return nil
		})
		return status
	})
}

// TryAcquire takes a permit if one is free, as Client.TryAcquire takes a key: an error
// matching ErrHeld when all Limit() permits are held.
func (s *Semaphore) TryAcquire(ctx context.Context, opts *AcquireOptions) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := acquireOptions(opts, time.Time{}, false)
	if err != nil {
		return nil, err
	}
	defer C.accord_acquire_options_free(o)
	var ptr *C.accord_lease
	var cerr *C.accord_error
	err = s.use(func(sp *C.accord_semaphore) error {
		return takeError(C.accord_semaphore_try_acquire(sp, o, &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	return s.client.adopt(ptr), nil
}

func (s *Semaphore) free() {
	C.accord_semaphore_free(s.ptr)
	s.ptr = nil
}
