package accord

// #include <stdlib.h>
// #include "accord.h"
import "C"

import (
	"context"
	"encoding/json"
	"time"
	"unsafe"
)

// listPrefix is the query's prefix ("" for none).
func listPrefix(query *ListQuery) string {
	if query == nil {
		return ""
	}
	return query.Prefix
}

// KeyState is the state of a key.
type KeyState int

// Key states; StateAll as a List filter means every state.
const (
	StateAll  KeyState = C.ACCORD_KEY_ANY
	StateHeld KeyState = C.ACCORD_KEY_HELD
	StateFree KeyState = C.ACCORD_KEY_FREE
	StateDone KeyState = C.ACCORD_KEY_DONE
)

// String is "held", "free", "done" or "all", as the other languages spell the states.
func (s KeyState) String() string {
	switch s {
	case StateHeld:
		return "held"
	case StateFree:
		return "free"
	case StateDone:
		return "done"
	}
	return "all"
}

// ListQuery filters and pages List. The zero value lists every key, 100 per page.
type ListQuery struct {
	Prefix   string         // keys starting with this, compared literally
	State    KeyState       // StateAll, StateHeld, StateFree or StateDone
	Metadata map[string]any // keys whose metadata contains this object
	Limit    int            // page size, 1..1000 (0: 100)
	Cursor   string         // from the previous page's NextCursor
}

// LeaseInfo is one key as the coordinator knows it.
type LeaseInfo struct {
	Key       string
	State     KeyState
	Owner     string // the holder while held, who finished it when done; "" when free
	Fence     int64
	ExpiresAt time.Time // zero unless held
	Metadata  map[string]any
	UpdatedAt time.Time
	// Shared: one of the key's shared holders (a key held shared is listed once per holder,
	// each with its own owner, fence and expiry).
	Shared bool
}

// ListPage is one page of List, in key order.
type ListPage struct {
	Items      []LeaseInfo
	NextCursor string // "" on the last page
}

// List returns a page of keys of the client's namespace.
func (c *Client) List(ctx context.Context, query *ListQuery) (*ListPage, error) {
	if err := noNUL("prefix", listPrefix(query)); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if query == nil {
		query = &ListQuery{}
	}
	q := C.accord_list_query_new()
	defer C.accord_list_query_free(q)
	var cerr *C.accord_error
	withString := func(value string, set func(*C.char) C.accord_status) error {
		if value == "" {
			return nil
		}
		cs := cstring(value)
		defer C.free(unsafe.Pointer(cs))
		return takeError(set(cs), cerr)
	}
	if err := withString(query.Prefix, func(s *C.char) C.accord_status { return C.accord_list_query_set_prefix(q, s, &cerr) }); err != nil {
		return nil, err
	}
	if err := withString(query.Cursor, func(s *C.char) C.accord_status { return C.accord_list_query_set_cursor(q, s, &cerr) }); err != nil {
		return nil, err
	}
	if query.Metadata != nil {
		text, err := json.Marshal(query.Metadata)
		if err != nil {
			return nil, &Error{Kind: ErrInvalidArgument, Message: "invalid metadata: " + err.Error()}
		}
		if err := withString(string(text), func(s *C.char) C.accord_status { return C.accord_list_query_set_metadata_json(q, s, &cerr) }); err != nil {
			return nil, err
		}
	}
	if err := takeError(C.accord_list_query_set_state(q, C.int32_t(query.State), &cerr), cerr); err != nil {
		return nil, err
	}
	if query.Limit != 0 {
		if err := takeError(C.accord_list_query_set_limit(q, C.uint32_t(query.Limit), &cerr), cerr); err != nil {
			return nil, err
		}
	}
	var page *C.accord_list_page
	err := c.use(func(cp *C.accord_client) error {
		return takeError(C.accord_client_list(cp, q, &page, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	defer C.accord_list_page_free(page)
	var n C.size_t
	first := C.accord_list_page_items(page, &n)
	out := &ListPage{Items: make([]LeaseInfo, 0, int(n))}
	if n > 0 {
		for _, it := range unsafe.Slice(first, int(n)) {
			info := LeaseInfo{
				Key:       C.GoString(it.key),
				State:     KeyState(it.state),
				Fence:     int64(it.fence),
				UpdatedAt: time.UnixMilli(int64(it.updated_at_ms)),
				Shared:    bool(it.shared),
			}
			if it.owner != nil {
				info.Owner = C.GoString(it.owner)
			}
			if it.expires_at_ms != 0 {
				info.ExpiresAt = time.UnixMilli(int64(it.expires_at_ms))
			}
			if err := json.Unmarshal([]byte(C.GoString(it.metadata_json)), &info.Metadata); err != nil {
				return nil, &Error{Kind: ErrInternal, Message: "metadata is not JSON: " + err.Error()}
			}
			out.Items = append(out.Items, info)
		}
	}
	if cursor := C.accord_list_page_next_cursor(page); cursor != nil {
		out.NextCursor = C.GoString(cursor)
	}
	return out, nil
}
