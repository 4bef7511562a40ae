package accord

// #include <stdlib.h>
// #include "accord.h"
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Membership of a group: docs/semantics.md, "Membership and fleets".

// JoinOptions of Join; nil means no metadata and the client's ttl.
type JoinOptions struct {
	// Metadata is what other members see of this one.
	Metadata map[string]any
	// TTL of the member lease (0: the client's): a member whose process dies leaves the group
	// this long after its last renewal.
	TTL time.Duration
}

// MemberInfo is one member of a group, as Members, a MemberWatch and Fleet.Members report it.
type MemberInfo struct {
	Owner    string         // the member's owner (its client's owner)
	Metadata map[string]any // as it last set it
	Since    time.Time      // when it joined (the coordinator's clock)
	Fence    int64          // of its member lease: a member that left and joined again has a new one
	// ExpiresAt is when its member lease expires unless renewed (zero if unknown).
	ExpiresAt time.Time
}

// memberInfos copies a C array of members (which the caller frees).
func memberInfos(arr *C.accord_member_info, n C.size_t) ([]MemberInfo, error) {
	infos := make([]MemberInfo, 0, int(n))
	if n == 0 {
		return infos, nil
	}
	for _, m := range unsafe.Slice(arr, int(n)) {
		info := MemberInfo{
			Owner: C.GoString(m.owner),
			Since: time.UnixMilli(int64(m.since_ms)),
			Fence: int64(m.fence),
		}
		if m.expires_at_ms != 0 {
			info.ExpiresAt = time.UnixMilli(int64(m.expires_at_ms))
		}
		if err := json.Unmarshal([]byte(C.GoString(m.metadata_json)), &info.Metadata); err != nil {
			return nil, &Error{Kind: ErrInternal, Message: "member metadata is not JSON: " + err.Error()}
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// Member is this client's membership of a group: a lease on `accord.group/<group>/<owner>`,
// renewed with the client's other leases. Leave it when done; a Member that becomes
// unreachable without a Leave leaves when the garbage collector finds it. Its methods may be
// called from any goroutine.
type Member struct {
	client *Client
	ptr    *C.accord_member // freed when the Member is garbage
	group  string
	key    string
	fence  int64
	lost   chan struct{}
}

// Join joins group as this client's owner. One membership per owner and group: while this
// owner is a member already, it waits up to the ttl for that membership to end (then
// ErrTimeout); the context is checked before, not during, that wait.
func (c *Client) Join(ctx context.Context, group string, opts *JoinOptions) (*Member, error) {
	if err := noNUL("group", group); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &JoinOptions{}
	}
	cm, err := metadataJSON(opts.Metadata)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cm))
	cgroup := cstring(group)
	defer C.free(unsafe.Pointer(cgroup))
	var ptr *C.accord_member
	var cerr *C.accord_error
	err = c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_join(cp, cgroup, cm, millis(opts.TTL), &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	m := &Member{
		client: c,
		ptr:    ptr,
		group:  C.GoString(C.accord_member_group(ptr)),
		key:    C.GoString(C.accord_member_key(ptr)),
		fence:  int64(C.accord_member_fence(ptr)),
		lost:   make(chan struct{}),
	}
	c.lostMu.Lock()
	c.lost[m.fence] = m.lost
	c.lostMu.Unlock()
	runtime.SetFinalizer(m, (*Member).free)
	return m, nil
}

// Group is the group joined.
func (m *Member) Group() string { return m.group }

// Key is the key of the member's lease (`accord.group/<group>/<owner>`).
func (m *Member) Key() string { return m.key }

// Fence is the fence of the member's lease.
func (m *Member) Fence() int64 { return m.fence }

// Lost is closed when the membership is lost (not renewed in time, or the client closed); never
// for a member that left.
func (m *Member) Lost() <-chan struct{} { return m.lost }

// IsLost reports whether the membership is lost.
func (m *Member) IsLost() bool {
	defer runtime.KeepAlive(m)
	return bool(C.accord_member_is_lost(m.ptr))
}

// Status is where the member's lease stands (LeaseReleased once it left).
func (m *Member) Status() LeaseStatus {
	defer runtime.KeepAlive(m)
	return leaseStatus(C.accord_member_status(m.ptr))
}

// UpdateMetadata replaces the member's metadata (what Members shows), renewing its lease;
// watchers see MemberUpdated. After Leave it gives ErrLeaseLost.
func (m *Member) UpdateMetadata(ctx context.Context, metadata map[string]any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cm, err := metadataJSON(metadata)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cm))
	defer runtime.KeepAlive(m)
	var cerr *C.accord_error
	return takeError(C.accord_member_update_metadata(m.ptr, cm, &cerr), cerr)
}

// Leave leaves the group now: watchers see it Left. ErrLeaseLost if the membership was already
// lost; leaving again is harmless.
func (m *Member) Leave(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer runtime.KeepAlive(m)
	var cerr *C.accord_error
	err := takeError(C.accord_member_leave(m.ptr, &cerr), cerr)
	if C.accord_member_status(m.ptr) == C.ACCORD_LEASE_STATUS_RELEASED {
		m.client.forgetLost(m.fence)
	}
	return err
}

func (m *Member) free() {
	C.accord_member_free(m.ptr) // a member that has not left leaves in the background
	m.ptr = nil
	m.client.forgetLost(m.fence)
}

// Members lists the live members of group, oldest first, in one read.
func (c *Client) Members(ctx context.Context, group string) ([]MemberInfo, error) {
	if err := noNUL("group", group); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cgroup := cstring(group)
	defer C.free(unsafe.Pointer(cgroup))
	var arr *C.accord_member_info
	var n C.size_t
	var cerr *C.accord_error
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_members(cp, cgroup, &arr, &n, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	defer C.accord_member_info_array_free(arr, n)
	return memberInfos(arr, n)
}

// MemberEventKind says what a MemberEvent is.
type MemberEventKind int

// The kinds of member events.
const (
	// MembersNow is the first event of a watch: the members when it started (maybe none).
	MembersNow MemberEventKind = C.ACCORD_MEMBER_EVENT_MEMBERS
	// MemberJoined: Members[0] joined.
	MemberJoined MemberEventKind = C.ACCORD_MEMBER_EVENT_JOINED
	// MemberLeft: Members[0] left (it left, its client closed, or its lease expired).
	MemberLeft MemberEventKind = C.ACCORD_MEMBER_EVENT_LEFT
	// MemberUpdated: Members[0] replaced its metadata (UpdateMetadata); it is as it is now.
	// Updates between two reads of the watch come as one, with the latest metadata.
	MemberUpdated MemberEventKind = C.ACCORD_MEMBER_EVENT_UPDATED
)

// MemberEvent is what a MemberWatch yields.
type MemberEvent struct {
	Kind MemberEventKind
	// Members concerned: every member for MembersNow, the one that joined, left or was
	// updated otherwise.
	Members []MemberInfo
}

// MemberWatch yields the members of a group, then every MemberJoined, MemberLeft and
// MemberUpdated, in order. Read it
// from one goroutine at a time; Close may be called from any.
type MemberWatch struct {
	ptr     *C.accord_member_watch // freed when the MemberWatch is garbage
	closing sync.Once
}

// Watch watches group: Next yields its members now, then every join, leave and metadata
// update in order. It listens
// before it returns, so that no change from then on is missed.
func (c *Client) Watch(ctx context.Context, group string) (*MemberWatch, error) {
	if err := noNUL("group", group); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cgroup := cstring(group)
	defer C.free(unsafe.Pointer(cgroup))
	var ptr *C.accord_member_watch
	var cerr *C.accord_error
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_watch(cp, cgroup, &ptr, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	w := &MemberWatch{ptr: ptr}
	runtime.SetFinalizer(w, (*MemberWatch).free)
	return w, nil
}

// cancellable runs a blocking C call given a cancel token that fires when ctx ends; its error
// then matches ErrCancelled and the context's error.
func cancellable(ctx context.Context, call func(*C.accord_cancel_token, **C.accord_error) C.accord_status) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return withContext(ctx, withCancelToken(ctx, call))
}

// withCancelToken runs a blocking C call given a cancel token that fires when ctx ends, and
// returns its error as libaccord gave it.
func withCancelToken(ctx context.Context, call func(*C.accord_cancel_token, **C.accord_error) C.accord_status) error {
	token := C.accord_cancel_token_new()
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		C.accord_cancel_token_cancel(token)
		close(cancelled)
	})
	var cerr *C.accord_error
	err := takeError(call(token, &cerr), cerr)
	if !stop() {
		<-cancelled // the canceller may still be using the token
	}
	C.accord_cancel_token_free(token)
	return err
}

// Next waits for the next event, as long as ctx allows (its end gives an error matching both
// ErrCancelled and the context's error). After Close, or once the client is closed, it gives
// an error matching ErrClosed.
func (w *MemberWatch) Next(ctx context.Context) (MemberEvent, error) {
	defer runtime.KeepAlive(w)
	var ev *C.accord_member_event
	err := cancellable(ctx, func(token *C.accord_cancel_token, cerr **C.accord_error) C.accord_status {
		return C.accord_member_watch_next(w.ptr, -1, token, &ev, cerr)
	})
	if err != nil {
		return MemberEvent{}, err
	}
	defer C.accord_member_event_free(ev)
	members, err := memberInfos(ev.members, ev.n_members)
	if err != nil {
		return MemberEvent{}, err
	}
	return MemberEvent{Kind: MemberEventKind(ev.kind), Members: members}, nil
}

// Close stops the watch: a Next waiting returns ErrClosed, and so does every later one.
// Idempotent.
func (w *MemberWatch) Close() error {
	w.closing.Do(func() { C.accord_member_watch_close(w.ptr) })
	runtime.KeepAlive(w)
	return nil
}

func (w *MemberWatch) free() {
	C.accord_member_watch_free(w.ptr)
	w.ptr = nil
}
