package accord

// #include "accord.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors, one per error kind of docs/semantics.md. Every error accord returns matches exactly one
// of them with errors.Is.
var (
	ErrInvalidArgument = errors.New("accord: invalid argument")
	ErrHeld            = errors.New("accord: held")
	ErrDone            = errors.New("accord: done")
	ErrTimeout         = errors.New("accord: timeout")
	ErrCancelled       = errors.New("accord: cancelled")
	ErrLeaseLost       = errors.New("accord: lease lost")
	ErrConnection      = errors.New("accord: connection")
	ErrDatabase        = errors.New("accord: database")
	ErrClosed          = errors.New("accord: closed")
	ErrUnsupported     = errors.New("accord: unsupported")
	ErrInternal        = errors.New("accord: internal")
	ErrTrimmed         = errors.New("accord: trimmed")
)

// sentinels is indexed by libaccord's status values (ACCORD_OK, 0, has none).
var sentinels = [...]error{
	C.ACCORD_INVALID_ARGUMENT: ErrInvalidArgument,
	C.ACCORD_HELD:             ErrHeld,
	C.ACCORD_DONE:             ErrDone,
	C.ACCORD_TIMEOUT:          ErrTimeout,
	C.ACCORD_CANCELLED:        ErrCancelled,
	C.ACCORD_LEASE_LOST:       ErrLeaseLost,
	C.ACCORD_CONNECTION:       ErrConnection,
	C.ACCORD_DATABASE:         ErrDatabase,
	C.ACCORD_CLOSED:           ErrClosed,
	C.ACCORD_UNSUPPORTED:      ErrUnsupported,
	C.ACCORD_INTERNAL:         ErrInternal,
	C.ACCORD_TRIMMED:          ErrTrimmed,
}

// Error is what accord's calls return: the kind (a sentinel, for errors.Is) and the message,
// which names the key or argument concerned.
type Error struct {
	Kind    error
	Message string
}

func (e *Error) Error() string        { return e.Message }
func (e *Error) Is(target error) bool { return target == e.Kind }
func (e *Error) Unwrap() error        { return e.Kind }

// takeError turns a status and the C error object (freed here) into a Go error.
func takeError(status C.accord_status, cerr *C.accord_error) error {
	defer C.accord_error_free(cerr)
	if status == C.ACCORD_OK {
		return nil
	}
	// The message in Go's words: durations as time.Duration prints them, the options' names.
	return errorOf(int(status), C.GoString(C.accord_error_message_in(cerr, C.ACCORD_WORDS_GO)))
}

// errorOf is the error of a (failure) status with libaccord's message: its kind is the status's
// sentinel (ErrInternal for a status this package does not know).
func errorOf(status int, msg string) error {
	var kind error = ErrInternal
	if status > 0 && status < len(sentinels) && sentinels[status] != nil {
		kind = sentinels[status]
	}
	if msg == "" {
		msg = kind.Error()
	}
	return &Error{Kind: kind, Message: msg}
}

// statusName is libaccord's name of a status ("ACCORD_HELD"), "" for a value that is none.
func statusName(status int) string {
	name := C.accord_status_name(C.int32_t(status))
	if name == nil {
		return ""
	}
	return C.GoString(name)
}

// withContext makes an error caused by the context match the context's error too.
func withContext(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if errors.Is(err, ErrCancelled) || errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}
