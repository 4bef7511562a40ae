package accord

// #include <stdlib.h>
// #include "accord.h"
import "C"

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"unsafe"
)

// SQLCall is a statement to run in the application's own transaction, with any driver: Text
// takes Args as $1, $2, … (strings, or nil for NULL; the statement casts each to its type).
type SQLCall struct {
	Text string
	Args []any
}

// FenceCheckSQL is the statement Fenced runs (accord.check_fence), for a driver of your own.
// A refusal by the server: pass the driver's error to FencedRefusal.
func (l *Lease) FenceCheckSQL() (SQLCall, error) {
	return l.sqlCall(func(p *C.accord_lease, text **C.char, args ***C.char, n *C.uintptr_t, e **C.accord_error) C.accord_status {
		return C.accord_lease_fence_check_sql(p, text, args, n, e)
	})
}

// DoneSQL is the statement DoneIn runs (accord.done, merging metadata, which may be nil; it
// answers the key's metadata as JSON text), for a driver of your own. After running it, call
// DoneSent.
func (l *Lease) DoneSQL(metadata map[string]any) (SQLCall, error) {
	cm, err := metadataJSON(metadata)
	if err != nil {
		return SQLCall{}, err
	}
	defer C.free(unsafe.Pointer(cm))
	return l.sqlCall(func(p *C.accord_lease, text **C.char, args ***C.char, n *C.uintptr_t, e **C.accord_error) C.accord_status {
		return C.accord_lease_done_sql(p, cm, text, args, n, e)
	})
}

// DoneSent tells the lease that DoneSQL's statement ran in the application's transaction: it
// settles as done at once after the commit (otherwise at its next renewal), and is renewed as
// before after a rollback.
func (l *Lease) DoneSent() {
	l.mu.Lock()
	defer l.mu.Unlock()
	C.accord_lease_done_sent(l.ptr)
}

func (l *Lease) sqlCall(f func(*C.accord_lease, **C.char, ***C.char, *C.uintptr_t, **C.accord_error) C.accord_status) (SQLCall, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var text *C.char
	var args **C.char
	var n C.uintptr_t
	var cerr *C.accord_error
	if err := takeError(f(l.ptr, &text, &args, &n, &cerr), cerr); err != nil {
		return SQLCall{}, err
	}
	defer C.accord_string_free(text)
	defer C.accord_string_array_free(args, n)
	call := SQLCall{Text: C.GoString(text), Args: make([]any, int(n))}
	for i, arg := range unsafe.Slice(args, int(n)) {
		if arg != nil {
			call.Args[i] = C.GoString(arg)
		}
	}
	return call, nil
}

// FencedRefusal is accord's error for a driver's error from a statement of FenceCheckSQL
// (what: "check_fence") or DoneSQL ("done"): ErrLeaseLost when the lease is not the key's live
// grant (SQLSTATE AC001, the message naming key, fence and why), ErrInvalidArgument for a
// refused argument, ErrDatabase for another refusal. An error with no SQLSTATE (a broken
// connection, a context cancelled) is returned as it is. The driver's error must have a
// SQLState() method, as pgx's *pgconn.PgError and lib/pq's *pq.Error do.
func FencedRefusal(what string, err error) error {
	var coded interface{ SQLState() string }
	if err == nil || !errors.As(err, &coded) {
		return err
	}
	cwhat, cstate, cmsg := cstring(what), cstring(coded.SQLState()), cstring(serverMessage(coded, err))
	defer C.free(unsafe.Pointer(cwhat))
	defer C.free(unsafe.Pointer(cstate))
	defer C.free(unsafe.Pointer(cmsg))
	var cerr *C.accord_error
	return takeError(C.accord_fenced_refusal(cwhat, cstate, cmsg, &cerr), cerr)
}

// serverMessage is the server's own message: the Message field pgx's and lib/pq's errors carry
// (their Error() adds a severity and the SQLSTATE), else the error's text.
func serverMessage(coded any, err error) string {
	v := reflect.ValueOf(coded)
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
		if f := v.Elem().FieldByName("Message"); f.IsValid() && f.Kind() == reflect.String {
			return f.String()
		}
	}
	return err.Error()
}

// Tx is the application's transaction, of database/sql or pgx: *sql.Tx (or *sql.Conn inside
// BEGIN), or pgx.Tx (or *pgx.Conn, a pgxpool connection inside BEGIN); anything with
// database/sql's QueryRowContext or pgx's QueryRow(ctx, sql, args...) answering a row with
// Scan. The package depends on neither driver.
type Tx any

type sqlQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type scanner interface{ Scan(dest ...any) error }

var (
	contextType = reflect.TypeOf((*context.Context)(nil)).Elem()
	scannerType = reflect.TypeOf((*scanner)(nil)).Elem()
)

// queryRow runs call on tx and scans its one value into dest.
func queryRow(ctx context.Context, tx Tx, call SQLCall, dest any) error {
	if t, ok := tx.(sqlQueryer); ok {
		return t.QueryRowContext(ctx, call.Text, call.Args...).Scan(dest)
	}
	// pgx's QueryRow answers a pgx.Row: called by reflection, so that this package needs no
	// pgx (Go interfaces cannot name a method answering another package's interface).
	m := reflect.ValueOf(tx).MethodByName("QueryRow")
	if !m.IsValid() || !pgxQueryRow(m.Type()) {
		return &Error{Kind: ErrInvalidArgument, Message: "invalid tx: a database/sql *sql.Tx or a pgx.Tx is needed, not " + reflect.TypeOf(tx).String()}
	}
	args := []reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(call.Text), reflect.ValueOf(call.Args)}
	return m.CallSlice(args)[0].Interface().(scanner).Scan(dest)
}

// pgxQueryRow reports whether t is pgx's QueryRow(ctx, sql string, args ...any) Row.
func pgxQueryRow(t reflect.Type) bool {
	return t.NumIn() == 3 && t.IsVariadic() && t.In(0) == contextType &&
		t.In(1).Kind() == reflect.String && t.In(2) == reflect.TypeOf([]any(nil)) &&
		t.NumOut() == 1 && t.Out(0).Implements(scannerType)
}

// Fenced checks this lease in tx, the application's transaction, before its writes: after nil,
// every write tx makes commits before any later grant of the key, even if the lease expires
// before the commit. ErrLeaseLost when the lease is not the key's live grant (the message names
// key, fence and why) or already lost here: roll tx back. ErrUnsupported on the embedded store.
// Until tx ends the key's row is held: the lease's own renewal waits for it, so keep such
// transactions well inside the ttl.
func (l *Lease) Fenced(ctx context.Context, tx Tx) error {
	call, err := l.FenceCheckSQL()
	if err != nil {
		return err
	}
	var ignored any
	return FencedRefusal("check_fence", queryRow(ctx, tx, call, &ignored))
}

// DoneIn marks this lease's key done in tx, merging metadata (may be nil), and answers the
// key's metadata. The done commits with tx's writes or not at all: after the commit the lease
// ends as done (Status LeaseDone, not lost), after a rollback it is still held and renewed.
// Errors as Done's, and ErrLeaseLost as Fenced's.
func (l *Lease) DoneIn(ctx context.Context, tx Tx, metadata map[string]any) (map[string]any, error) {
	call, err := l.DoneSQL(metadata)
	if err != nil {
		return nil, err
	}
	var merged string
	err = queryRow(ctx, tx, call, &merged)
	l.DoneSent()
	if err != nil {
		return nil, FencedRefusal("done", err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(merged), &m); err != nil {
		return nil, &Error{Kind: ErrInternal, Message: "stored metadata is not a JSON object: " + err.Error()}
	}
	return m, nil
}
