// The chaos run's Go worker (chaos/run.py starts it; see chaos/workers/worker.py for the loop
// and docs/reliability.md). Fenced writes through libpq (cgo), a connection of its own.
// Configured by the environment: CHAOS_URL, CHAOS_WRITER_URL, CHAOS_NAMESPACE, CHAOS_NAME,
// CHAOS_KEYS, CHAOS_TTL_MS.
package main

/*
#cgo pkg-config: libpq
#include <stdlib.h>
#include <string.h>
#include <libpq-fe.h>

static PGconn *db;

// 1 accepted, 0 refused, -1 failed (reconnects next time).
static int fenced_write(const char *url, const char *fence, const char *name, const char *key) {
	if (db == NULL || PQstatus(db) != CONNECTION_OK) {
		if (db) PQfinish(db);
		db = PQconnectdb(url);
		if (PQstatus(db) != CONNECTION_OK) { PQfinish(db); db = NULL; return -1; }
	}
	const char *params[3] = {fence, name, key};
	PGresult *res = PQexecParams(db,
		"UPDATE chaos_resource SET fence = $1, writer = $2 WHERE key = $3 AND fence < $1",
		3, NULL, params, NULL, NULL, 0);
	int result = -1;
	if (PQresultStatus(res) == PGRES_COMMAND_OK) {
		result = strcmp(PQcmdTuples(res), "1") == 0 ? 1 : 0;
	} else {
		PQfinish(db);
		db = NULL;
	}
	PQclear(res);
	return result;
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

func write(url, key string, fence int64, name string) int {
	curl, ckey, cname := C.CString(url), C.CString(key), C.CString(name)
	cfence := C.CString(strconv.FormatInt(fence, 10))
	defer func() {
		for _, p := range []*C.char{curl, ckey, cname, cfence} {
			C.free(unsafe.Pointer(p))
		}
	}()
	return int(C.fenced_write(curl, cfence, cname, ckey))
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
		switch write(writerURL, key, fence, name) {
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
