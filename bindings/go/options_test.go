package accord

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The client options' durations have no "without limit": a negative one is refused, naming
// the option as the other languages do.
func TestClientOptionsRefuseNegativeTimeouts(t *testing.T) {
	ctx := context.Background()
	for field, opts := range map[string]*ClientOptions{
		"StatementTimeout": {StatementTimeout: -time.Second},
		"ConnectTimeout":   {ConnectTimeout: -time.Second},
	} {
		if _, err := Connect(ctx, databaseURL(t), opts); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Errorf("negative %s: %v", field, err)
		}
	}
}

// psqlSession is a psql process of its own, for a transaction that stays open across calls.
type psqlSession struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
}

func openPsql(t *testing.T) *psqlSession {
	t.Helper()
	bin := "psql"
	if dir := os.Getenv("ACCORD_TEST_PG_BINDIR"); dir != "" {
		bin = filepath.Join(dir, "psql")
	}
	cmd := exec.Command(bin, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", databaseURL(t))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &psqlSession{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
	t.Cleanup(func() { p.in.Close(); p.cmd.Wait() })
	return p
}

// run sends sql and returns once psql has run it (it echoes a marker afterwards).
func (p *psqlSession) run(t *testing.T, sql string) {
	t.Helper()
	fmt.Fprintf(p.in, "%s\n\\echo accord-test-ran\n", sql)
	for p.lines.Scan() {
		if p.lines.Text() == "accord-test-ran" {
			return
		}
	}
	t.Fatalf("psql ended before running %q", sql)
}

// StatementTimeout takes effect: with the key's row locked by another transaction, TryAcquire
// can only end by its statement timing out, which breaks the connection (ErrConnection) after
// the timeout set here, not the default 10 s; the core's message says which.
func TestStatementTimeoutTakesEffect(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	c, err := Connect(ctx, databaseURL(t), &ClientOptions{Namespace: ns, Owner: "o1", StatementTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The key's row exists and is free.
	if err := must(c.Acquire(ctx, "a", nil)).Release(ctx); err != nil {
		t.Fatal(err)
	}
	locker := openPsql(t)
	locker.run(t, fmt.Sprintf("BEGIN; SELECT 1 FROM accord.leases WHERE namespace = '%s' AND key = 'a' FOR UPDATE;", ns))
	started := time.Now()
	lease, err := c.TryAcquire(ctx, "a", nil)
	elapsed := time.Since(started)
	locker.run(t, "ROLLBACK;")
	if !errors.Is(err, ErrConnection) || !strings.Contains(err.Error(), "within 500ms") {
		t.Fatalf("try_acquire of a locked row: %v %v", lease, err)
	}
	if elapsed < 500*time.Millisecond {
		t.Fatalf("failed after %v, before the statement timeout", elapsed)
	}
	// The statement that timed out may still have granted the key once the lock went (its
	// connection was dropped, not the statement): nothing is checked about "a" afterwards.
}
