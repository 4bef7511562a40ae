package fencedtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	accord "github.com/accord/accord/bindings/go"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// Against the PostgreSQL named by ACCORD_TEST_DATABASE_URL (make test-go starts one).
func databaseURL(t *testing.T) string {
	url := os.Getenv("ACCORD_TEST_DATABASE_URL")
	if url == "" {
		t.Fatal("ACCORD_TEST_DATABASE_URL is not set: run the tests through `make test-go`")
	}
	return url
}

type fixture struct {
	ctx    context.Context
	ns     string
	a, b   *accord.Client
	db     *sql.DB
	conn   *pgx.Conn
	table  string
	insert string
}

func setup(t *testing.T) *fixture {
	ctx := context.Background()
	f := &fixture{ctx: ctx, ns: fmt.Sprintf("go-fenced-%s-%d", t.Name(), time.Now().UnixNano())}
	for _, c := range []**accord.Client{&f.a, &f.b} {
		client, err := accord.Connect(ctx, databaseURL(t), &accord.ClientOptions{Namespace: f.ns})
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { client.Close() })
		*c = client
	}
	db, err := sql.Open("pgx", databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := pgx.Connect(ctx, databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	f.db, f.conn = db, conn
	f.table = fmt.Sprintf("go_fenced_%d", time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+f.table+" (key text PRIMARY KEY, result text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.ExecContext(ctx, "DROP TABLE "+f.table) })
	f.insert = "INSERT INTO " + f.table + " VALUES ($1, 'ok')"
	return f
}

func (f *fixture) rows(t *testing.T) string {
	var keys string
	err := f.db.QueryRowContext(f.ctx, "SELECT coalesce(string_agg(key, ',' ORDER BY key), '') FROM "+f.table).Scan(&keys)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func (f *fixture) acquire(t *testing.T, key string) *accord.Lease {
	lease, err := f.a.Acquire(f.ctx, key, &accord.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// waitStatus waits (bounded, to catch a hang) until the lease's status is want.
func waitStatus(t *testing.T, lease *accord.Lease, want accord.LeaseStatus) {
	for until := time.Now().Add(time.Minute); lease.Status() != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(until) {
			t.Fatalf("lease status %s, never %s", lease.Status(), want)
		}
	}
}

func TestFencedWriteWithDatabaseSQL(t *testing.T) {
	f := setup(t)
	live := f.acquire(t, "live")
	tx, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Fenced(f.ctx, tx); err != nil {
		t.Fatalf("a live lease: %v", err)
	}
	if _, err := tx.ExecContext(f.ctx, f.insert, "live"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// A lease that ended after its statement was made: the server refuses it, as ErrLeaseLost
	// naming key and fence, and nothing is written; the helper refuses it here too.
	gone := f.acquire(t, "gone")
	call, err := gone.FenceCheckSQL()
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Release(f.ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ignored any
	err = accord.FencedRefusal("check_fence", tx.QueryRowContext(f.ctx, call.Text, call.Args...).Scan(&ignored))
	if !errors.Is(err, accord.ErrLeaseLost) || !strings.Contains(err.Error(), "'gone'") ||
		!strings.Contains(err.Error(), fmt.Sprint(gone.Fence())) || strings.Contains(err.Error(), "SQLSTATE") {
		t.Fatalf("the server's refusal: %v", err)
	}
	tx.Rollback()
	tx, err = f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Fenced(f.ctx, tx); !errors.Is(err, accord.ErrLeaseLost) {
		t.Fatalf("a released lease: %v", err)
	}
	tx.Rollback()
	if got := f.rows(t); got != "live" {
		t.Fatalf("rows %q", got)
	}

	// done rolled back: neither the row nor the done, the lease still held.
	kept := f.acquire(t, "kept")
	tx, err = f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx.ExecContext(f.ctx, f.insert, "kept")
	merged, err := kept.DoneIn(f.ctx, tx, map[string]any{"r": 1})
	if err != nil || merged["r"] != float64(1) {
		t.Fatalf("done in: %v %v", merged, err)
	}
	// The server's refusal through the helper: the key is done in this very transaction.
	if err := kept.Fenced(f.ctx, tx); !errors.Is(err, accord.ErrLeaseLost) || !strings.Contains(err.Error(), "the key is done") || strings.Contains(err.Error(), "SQLSTATE") {
		t.Fatalf("a fence check after done in the same transaction: %v", err)
	}
	tx.Rollback()
	if got := f.rows(t); got != "live" {
		t.Fatalf("rows %q", got)
	}
	if kept.Status() != accord.LeaseHeld {
		t.Fatalf("after the rollback: %s", kept.Status())
	}
	if _, err := f.b.TryAcquire(f.ctx, "kept", nil); !errors.Is(err, accord.ErrHeld) {
		t.Fatalf("another client after the rollback: %v", err)
	}
	if err := kept.Renew(f.ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestDoneInWithPgxCommits(t *testing.T) {
	f := setup(t)
	job := f.acquire(t, "job")
	tx, err := f.conn.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Fenced(f.ctx, tx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(f.ctx, f.insert, "job"); err != nil {
		t.Fatal(err)
	}
	if _, err := job.DoneIn(f.ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, job, accord.LeaseDone)
	if got := f.rows(t); got != "job" {
		t.Fatalf("rows %q", got)
	}
	if _, err := f.b.TryAcquire(f.ctx, "job", nil); !errors.Is(err, accord.ErrDone) {
		t.Fatalf("another client after the commit: %v", err)
	}

	// pgx's refusal, through the helper: a stale fence's statement, the lease released.
	gone := f.acquire(t, "gone")
	call, err := gone.DoneSQL(nil)
	if err != nil {
		t.Fatal(err)
	}
	gone.Release(f.ctx)
	tx, err = f.conn.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var merged string
	err = accord.FencedRefusal("done", tx.QueryRow(f.ctx, call.Text, call.Args...).Scan(&merged))
	if !errors.Is(err, accord.ErrLeaseLost) || !strings.Contains(err.Error(), "'gone'") {
		t.Fatalf("the server's refusal: %v", err)
	}
	tx.Rollback(f.ctx)
	if _, err := gone.DoneIn(f.ctx, f.conn, nil); !errors.Is(err, accord.ErrLeaseLost) {
		t.Fatalf("done in after release: %v", err)
	}
	if err := job.Fenced(f.ctx, struct{}{}); !errors.Is(err, accord.ErrLeaseLost) {
		t.Fatalf("a lease done: %v", err)
	}
	other := f.acquire(t, "other")
	if err := other.Fenced(f.ctx, struct{}{}); !errors.Is(err, accord.ErrInvalidArgument) || !strings.Contains(err.Error(), "tx") {
		t.Fatalf("not a transaction: %v", err)
	}
}

func TestEmbeddedStoreHasNoFencedWrites(t *testing.T) {
	ctx := context.Background()
	c, err := accord.Connect(ctx, "memory:go-fenced", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lease, err := c.TryAcquire(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.FenceCheckSQL(); !errors.Is(err, accord.ErrUnsupported) || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("fence check on the embedded store: %v", err)
	}
	if _, err := lease.DoneIn(ctx, nil, nil); !errors.Is(err, accord.ErrUnsupported) {
		t.Fatalf("done in on the embedded store: %v", err)
	}
}
