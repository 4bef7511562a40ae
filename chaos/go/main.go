// The chaos run's Go worker (chaos/run.py starts it; see chaos/workers/worker.py for the loop
// and docs/reliability.md). Fenced writes through libpq (cgo), a connection of its own: accord's
// check (Lease.FenceCheckSQL) and the UPDATE in one transaction.
// Configured by the environment: CHAOS_URL, CHAOS_WRITER_URL, CHAOS_NAMESPACE, CHAOS_NAME,
// CHAOS_KEYS, CHAOS_TTL_MS.
package main

/*
#cgo pkg-config: libpq
#include <stdlib.h>
#include <string.h>
#include <libpq-fe.h>

static PGconn *db;

// 0 connected (or already), -1 failed.
static int connect_writer(const char *url) {
	if (db != NULL && PQstatus(db) == CONNECTION_OK) return 0;
	if (db) PQfinish(db);
	db = PQconnectdb(url);
	if (PQstatus(db) != CONNECTION_OK) { PQfinish(db); db = NULL; return -1; }
	return 0;
}

static void drop_writer(void) { if (db) PQfinish(db); db = NULL; }

// Runs `sql`: the rows it changed (0 for none or a query), or -1 when it failed; then *state
// and *message are the server's SQLSTATE and message (the caller frees both).
static long run(const char *sql, int n, const char *const *params, char **state, char **message) {
	PGresult *res = PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType status = PQresultStatus(res);
	long rows = -1;
	if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
		rows = atol(PQcmdTuples(res));
	} else {
		const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		*state = strdup(s ? s : "");
		*message = strdup(m ? m : PQerrorMessage(db));
	}
	PQclear(res);
	return rows;
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	accord "github.com/accord/accord/bindings/go"
)

var out sync.Mutex

func say(event map[string]any) {
	event["t"] = float64(time.Now().UnixMicro()) / 1e6
	line, _ := json.Marshal(event)
	out.Lock()
	fmt.Println(string(line))
	out.Unlock()
}

// serverError is a statement's failure as libpq reports it, with the SQLSTATE that
// accord.FencedRefusal reads.
type serverError struct {
	state   string
	Message string
}

func (e *serverError) Error() string    { return e.Message }
func (e *serverError) SQLState() string { return e.state }

// exec runs text with args (strings, or nil for NULL) on the writer's connection: the rows it
// changed, or the server's error.
func exec(text string, args ...any) (int64, error) {
	ctext := C.CString(text)
	params := make([]*C.char, len(args)+1) // never empty: &params[0] is taken
	for i, arg := range args {
		if s, ok := arg.(string); ok {
			params[i] = C.CString(s)
		}
	}
	defer func() {
		C.free(unsafe.Pointer(ctext))
		for _, p := range params {
			C.free(unsafe.Pointer(p))
		}
	}()
	var state, message *C.char
	rows := C.run(ctext, C.int(len(args)), &params[0], &state, &message)
	if rows < 0 {
		defer C.free(unsafe.Pointer(state))
		defer C.free(unsafe.Pointer(message))
		return 0, &serverError{C.GoString(state), C.GoString(message)}
	}
	return int64(rows), nil
}

// write is the fenced write: accord's check (lease.FenceCheckSQL, run through libpq) and the
// UPDATE in one transaction. 1 accepted, 0 refused (by the check, or the row's fence was not
// smaller), -1 failed (reconnects next time).
func write(url string, lease *accord.Lease, key, name string) int {
	check, err := lease.FenceCheckSQL()
	if errors.Is(err, accord.ErrLeaseLost) {
		return 0 // this client already knows: nothing is sent
	}
	if err != nil {
		return -1
	}
	curl := C.CString(url)
	defer C.free(unsafe.Pointer(curl))
	if C.connect_writer(curl) != 0 {
		return -1
	}
	fence := strconv.FormatInt(lease.Fence(), 10)
	result := -1
	if _, err = exec("BEGIN"); err == nil {
		if _, err = exec(check.Text, check.Args...); err == nil {
			var rows int64
			rows, err = exec("UPDATE chaos_resource SET fence = $1, writer = $2 WHERE key = $3 AND fence < $1",
				fence, name, key)
			if err == nil {
				if _, err = exec("COMMIT"); err == nil && rows == 1 {
					result = 1
				} else if err == nil {
					result = 0
				}
			}
		} else if errors.Is(accord.FencedRefusal("check_fence", err), accord.ErrLeaseLost) {
			if _, err = exec("ROLLBACK"); err == nil {
				result = 0
			}
		}
	}
	if result < 0 {
		C.drop_writer()
	}
	return result
}

func main() {
	ctx := context.Background()
	name := os.Getenv("CHAOS_NAME")
	keys := strings.Split(os.Getenv("CHAOS_KEYS"), ",")
	ttlMs, err := strconv.Atoi(os.Getenv("CHAOS_TTL_MS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "CHAOS_TTL_MS is a number")
		os.Exit(2)
	}
	ttl := time.Duration(ttlMs) * time.Millisecond
	writerURL := os.Getenv("CHAOS_WRITER_URL")
	// The server may be restarting or failing over when a worker starts.
	var client *accord.Client
	for {
		client, err = accord.Connect(ctx, os.Getenv("CHAOS_URL"),
			&accord.ClientOptions{Namespace: os.Getenv("CHAOS_NAMESPACE"), Owner: name, TTL: ttl})
		if err == nil {
			break
		}
		say(map[string]any{"ev": "error", "op": "connect", "err": err.Error()})
		time.Sleep(500 * time.Millisecond)
	}
	say(map[string]any{"ev": "start", "w": name})
	for {
		key := keys[rand.Intn(len(keys))]
		lease, err := client.Acquire(ctx, key, &accord.AcquireOptions{TTL: ttl, Timeout: 3 * time.Second})
		if errors.Is(err, accord.ErrTimeout) {
			continue
		}
		if err != nil {
			say(map[string]any{"ev": "error", "op": "acquire", "err": err.Error()})
			time.Sleep(200 * time.Millisecond)
			continue
		}
		fence := lease.Fence()
		say(map[string]any{"ev": "granted", "key": key, "fence": fence})
		ended := make(chan struct{})
		go func() {
			select {
			case <-lease.Lost():
				say(map[string]any{"ev": "lost", "key": key, "fence": fence, "how": "signal"})
			case <-ended:
			}
		}()
		time.Sleep(time.Duration(20+rand.Intn(130)) * time.Millisecond)
		switch write(writerURL, lease, key, name) {
		case 1:
			say(map[string]any{"ev": "write", "key": key, "fence": fence, "accepted": true})
		case 0:
			say(map[string]any{"ev": "write", "key": key, "fence": fence, "accepted": false})
		default:
			say(map[string]any{"ev": "write_error", "key": key, "fence": fence})
		}
		time.Sleep(time.Duration(10+rand.Intn(40)) * time.Millisecond)
		err = lease.Release(ctx)
		switch {
		case err == nil:
			say(map[string]any{"ev": "released", "key": key, "fence": fence})
		case errors.Is(err, accord.ErrLeaseLost):
			// the watcher reports it
		default:
			say(map[string]any{"ev": "error", "op": "release", "err": err.Error()})
		}
		// Give the watcher a moment to see a lost that the release found out.
		time.Sleep(time.Millisecond)
		close(ended)
	}
}
