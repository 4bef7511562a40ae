package accord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// etcdURL is the etcd cluster named by ACCORD_TEST_ETCD_URL (scripts/with-etcd.sh starts one
// for `make test`), under a key prefix of this test's own; the test is skipped without it.
func etcdURL(t *testing.T) string {
	url := os.Getenv("ACCORD_TEST_ETCD_URL")
	if url == "" {
		t.Skip("ACCORD_TEST_ETCD_URL is not set (an etcd:// URL; scripts/with-etcd.sh starts a cluster)")
	}
	separator := "?"
	if strings.Contains(url, "?") {
		separator = "&"
	}
	return fmt.Sprintf("%s%sprefix=/accord-test/%s", url, separator, namespace(t))
}

// The quick start on etcd: the library is built with the cargo feature `etcd`.
func TestQuickStartOnEtcd(t *testing.T) {
	ctx := context.Background()
	url := etcdURL(t)
	open := func(owner string) *Client {
		c, err := Connect(ctx, url, &ClientOptions{Namespace: "reports", Owner: owner})
		if err != nil {
			t.Fatalf("connect to %s: %v", url, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	o1, o2 := open("o1"), open("o2")
	held := must(o1.Acquire(ctx, "daily", &AcquireOptions{TTL: 10 * time.Second, Timeout: 5 * time.Second}))
	if held.Fence() <= 0 {
		t.Fatalf("fence %d", held.Fence())
	}
	if _, err := o2.TryAcquire(ctx, "daily", nil); !errors.Is(err, ErrHeld) {
		t.Fatalf("try_acquire of a held key: %v", err)
	}

	// A waiter is granted once the holder releases: within the wait's 20 s bound, long before
	// the holder's 10 s ttl plus a keep-alive would free the key by itself.
	type grant struct {
		lease *Lease
		err   error
	}
	got := make(chan grant)
	go func() {
		l, err := o2.Acquire(ctx, "daily", &AcquireOptions{Timeout: 20 * time.Second})
		got <- grant{l, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if g.err != nil {
		t.Fatalf("the waiter: %v", g.err)
	}
	if g.lease.Fence() <= held.Fence() {
		t.Fatalf("fence %d after %d", g.lease.Fence(), held.Fence())
	}
	if err := g.lease.Done(ctx, map[string]any{"rows": 42}); err != nil {
		t.Fatal(err)
	}
	if _, err := o1.TryAcquire(ctx, "daily", nil); !errors.Is(err, ErrDone) {
		t.Fatalf("try_acquire of a key marked done: %v", err)
	}
	if reset, err := o1.Reset(ctx, "daily"); err != nil || !reset {
		t.Fatalf("reset: %v, %v", reset, err)
	}
	if err := must(o1.TryAcquire(ctx, "daily", nil)).Release(ctx); err != nil {
		t.Fatal(err)
	}

	sub := must(o2.Listen(ctx, "jobs"))
	defer sub.Close()
	if err := o1.Notify(ctx, "jobs", "report ready"); err != nil {
		t.Fatal(err)
	}
	if e := next(t, sub); e != (Event{Message, "jobs", "report ready"}) {
		t.Fatalf("got %+v", e)
	}
}
